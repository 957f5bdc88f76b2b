package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
)

// noCluster fails the test if a command tries to reach a cluster.
func noCluster(t *testing.T) func() (*rest.Config, error) {
	return func() (*rest.Config, error) {
		t.Fatal("the command reached for the cluster before validating its input")
		return nil, nil
	}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "guard.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestDispatch_badInputExitsNonZeroAndTouchesNothing(t *testing.T) {
	bad := writeConfig(t, "apiVersion: config.webhook-guard.io/v1alpha1\nkind: GuardConfiguration\ntargets:\n- configuration: a\n  webhook: a.example.com\n")
	cases := map[string]struct {
		args     []string
		wantCode int
		wantErr  string
	}{
		"no command is a usage error":               {nil, 2, "no command given"},
		"an unknown command is a usage error":       {[]string{"serve"}, 2, `unknown command "serve"`},
		"run without --config is a usage error":     {[]string{"run"}, 2, "--config is required"},
		"run with an unknown flag is a usage error": {[]string{"run", "--confg", bad}, 2, "flag provided but not defined: -confg"},
		"run with a missing file names the file": {[]string{"run", "--config", "/nonexistent/guard.yaml"}, 1,
			"reading configuration: open /nonexistent/guard.yaml: no such file or directory"},
		"run with an unapproved target names the file, field and value": {[]string{"run", "--config", bad}, 1,
			bad + ": invalid GuardConfiguration: targets[0].allowAdmissionWithoutMutation: Required value"},
		"status with a bad configuration touches nothing": {[]string{"status", "--config", bad}, 1, "allowAdmissionWithoutMutation: Required value"},
		"manifests with an unknown kind is a usage error": {[]string{"manifests", "crd"}, 2, `want "static", "policy", "rbac" or "marking"`},
		"manifests static without --url is a usage error": {[]string{"manifests", "static", "--config", writeConfig(t, validConfig)}, 2, "--url and --ca-file are required"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := dispatch(context.Background(), tc.args, &stdout, &stderr, noCluster(t))
			require.Error(t, err)
			assert.Equal(t, tc.wantCode, exitCode(err))
			assert.Contains(t, err.Error(), tc.wantErr)
			assert.Empty(t, stdout.String())
		})
	}
}

// A port in use fails the start at once, naming the flag and the address,
// before anything reaches the cluster.
func TestDispatch_aPortInUseIsReportedFirst(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	cfg := writeConfig(t, validConfig)
	for _, flag := range []string{"--metrics-bind-address", "--health-probe-bind-address", "--status-bind-address", "--pprof-bind-address"} {
		t.Run(flag, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := dispatch(context.Background(), []string{"run", "--config", cfg, "--health-probe-bind-address", "127.0.0.1:0", "--status-bind-address", "0", flag, busy.Addr().String()}, &stdout, &stderr, noCluster(t))
			require.Error(t, err)
			assert.Contains(t, err.Error(), flag+" "+busy.Addr().String()+": cannot listen")
			assert.Contains(t, err.Error(), "address already in use")
		})
	}
}

const validConfig = `apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
targets:
- configuration: slow-mutator
  webhook: slow-mutator.example.com
  allowAdmissionWithoutMutation: true
`

func TestDispatch_versionAndHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.NoError(t, dispatch(context.Background(), []string{"version"}, &stdout, &stderr, noCluster(t)))
	assert.Contains(t, stdout.String(), "webhook-guard ")

	stdout.Reset()
	require.NoError(t, dispatch(context.Background(), []string{"--help"}, &stdout, &stderr, noCluster(t)))
	for _, cmd := range []string{"run", "status", "manifests static", "version"} {
		assert.Contains(t, stdout.String(), cmd)
	}
}

func TestDispatch_manifestsPolicyRendersManagedNames(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.NoError(t, dispatch(context.Background(), []string{"manifests", "policy", "--config", writeConfig(t, validConfig)}, &stdout, &stderr, noCluster(t)))
	assert.Contains(t, stdout.String(), "kind: ValidatingAdmissionPolicy\n")
	assert.Contains(t, stdout.String(), "kind: ValidatingAdmissionPolicyBinding\n")
	assert.Contains(t, stdout.String(), "- slow-mutator\n")
}

func TestRunFlags_defaults(t *testing.T) {
	var o runOptions
	require.NoError(t, newRunFlags(&o).Parse(nil))
	assert.Equal(t, "0", o.MetricsAddr)
	assert.Equal(t, ":8081", o.ProbeAddr)
	assert.False(t, o.LeaderElect)
	assert.Equal(t, "webhook-guard-system", o.LeaderElectionNamespace)
	assert.Equal(t, 9443, o.WebhookPort)
	assert.Empty(t, o.WebhookCertDir)
}

// The breaker writes and the guard protects the same names; they live in
// two sibling packages that must not import each other, so this is where
// they meet.
