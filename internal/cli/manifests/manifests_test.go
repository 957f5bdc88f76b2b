package manifests

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

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
	cmd := NewCmd(cli.IOStreams{Out: &stdout, ErrOut: &stderr}, factory.New(func(string, string) (*rest.Config, error) {
		t.Fatal("manifests reached for a cluster")
		return nil, nil
	}))
	cmd.SetArgs([]string{"policy", "--config", cfg})
	require.NoError(t, cmd.Execute())
	assert.Contains(t, stdout.String(), "kind: ValidatingAdmissionPolicy\n")
	assert.Contains(t, stdout.String(), "kind: ValidatingAdmissionPolicyBinding\n")
	assert.Contains(t, stdout.String(), "- slow-mutator\n")
}
