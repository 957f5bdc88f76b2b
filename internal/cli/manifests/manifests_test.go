package manifests

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/webhook-guard/webhook-guard/internal/cli"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
)

const validConfig = `apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
targets:
- configuration: slow-mutator
  webhook: slow-mutator.example.com
  allowAdmissionWithoutMutation: true
`

func TestDispatch_manifestsPolicyRendersManagedNames(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "guard.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(validConfig), 0o600))
	var stdout, stderr bytes.Buffer
	cmd := NewCmd(cli.IOStreams{Out: &stdout, ErrOut: &stderr}, factory.New(func(clientcmd.ClientConfig) (*rest.Config, error) {
		t.Fatal("manifests reached for a cluster")
		return nil, nil
	}))
	cmd.SetArgs([]string{"policy", "--config", cfg})
	require.NoError(t, cmd.Execute())
	assert.Contains(t, stdout.String(), "kind: ValidatingAdmissionPolicy\n")
	assert.Contains(t, stdout.String(), "kind: ValidatingAdmissionPolicyBinding\n")
	assert.Contains(t, stdout.String(), "- slow-mutator\n")
}

// "guard manifests rbac" (alias "targets") writes the ClusterRole and,
// in the namespace of the path probe's Service, the Role and RoleBinding
// that bind the --breaker ServiceAccount; the ClusterRole grants nothing
// on services/proxy.
func TestDispatch_manifestsRbacGrantsThePathProbeInItsServicesNamespace(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "guard.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(validConfig+`  apiserverSignal:
    pathProbe:
      service: {namespace: webhooks, name: slow-mutator, port: 8443}
`), 0o600))
	for _, kind := range []string{"rbac", "targets"} {
		t.Run(kind, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := NewCmd(cli.IOStreams{Out: &stdout, ErrOut: &stderr}, factory.New(func(clientcmd.ClientConfig) (*rest.Config, error) {
				t.Fatal("manifests reached for a cluster")
				return nil, nil
			}))
			cmd.SetArgs([]string{kind, "--config", cfg, "--breaker", "system:serviceaccount:guard-ns:webhook-guard"})
			require.NoError(t, cmd.Execute())
			docs := strings.Split(stdout.String(), "\n---\n")
			require.Len(t, docs, 3, stdout.String())
			assert.Contains(t, docs[0], "kind: ClusterRole\n")
			assert.NotContains(t, docs[0], "services/proxy")
			assert.Contains(t, docs[1], "kind: Role\n")
			assert.Contains(t, docs[1], "  namespace: webhooks\n")
			assert.Contains(t, docs[1], "  - https:slow-mutator:8443\n")
			assert.Contains(t, docs[1], "  - services/proxy\n")
			assert.Contains(t, docs[2], "kind: RoleBinding\n")
			assert.Contains(t, docs[2], "  namespace: webhooks\n")
			assert.Contains(t, docs[2], "- kind: ServiceAccount\n  name: webhook-guard\n  namespace: guard-ns\n")
		})
	}
}
