package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The guard binary is also a kubectl plugin: named kubectl-guard on PATH,
// real kubectl's plugin lookup finds it, runs it for "kubectl guard ...",
// and it reads the same kubeconfig (KUBECONFIG) and names itself
// "kubectl guard".
func TestPlugin_kubectlGuardRunsThroughKubectlsPluginLookup(t *testing.T) {
	ctx := context.Background()
	bin, err := env.BuildGuard()
	require.NoError(t, err)
	dir := t.TempDir()
	data, err := os.ReadFile(bin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kubectl-guard"), data, 0o755))
	ns := testNamespace(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
targets:
- configuration: plugin-test
  webhook: a.plugin-test.example.com
  allowAdmissionWithoutMutation: true
`), 0o600))
	kubectl := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(env.BinDir, "kubectl"), args...)
		cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+env.KubeconfigPath)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := kubectl("plugin", "list")
	require.NoError(t, err, out)
	assert.Contains(t, out, filepath.Join(dir, "kubectl-guard"))

	out, err = kubectl("guard", "status", "--help")
	require.NoError(t, err, out)
	assert.Contains(t, out, "kubectl guard status", "the plugin names itself as kubectl runs it")

	out, err = kubectl("guard", "status", "--config", cfg, "-n", ns)
	require.NoError(t, err, out)
	assert.Contains(t, out, "a.plugin-test.example.com", "kubectl guard status read the cluster")
	assert.Contains(t, out, "Lease "+ns+"/webhook-guard.webhook-guard.io", "and looked for the leader in "+ns)

	out, err = kubectl("guard", "status", "--config", cfg, "-n", ns, "--exit-code")
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, out)
	assert.Contains(t, []int{4, 5}, exit.ExitCode(), "no leader (4) or, with no guard policy of this instance, 5: not a usage error's 2")
	assert.False(t, strings.Contains(out, "Usage:"), "a finding is no usage error")

	// kubectl's -o jsonpath, through kubectl: stdout is the template's
	// output alone (what could not be read goes to stderr).
	status := exec.CommandContext(ctx, filepath.Join(env.BinDir, "kubectl"), "guard", "status", "--config", cfg, "-n", ns,
		"-o", `jsonpath={range .targets[*]}{.webhook} {.state}{"\n"}{end}`)
	status.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+env.KubeconfigPath)
	stdout, err := status.Output()
	require.NoError(t, err, "%s", stdout)
	assert.Equal(t, "a.plugin-test.example.com Missing\n", string(stdout), "kubectl guard status -o jsonpath")

	out, err = kubectl("guard", "status", "--config", cfg, "-n", ns, "-o", "jsonpath={.targets[")
	require.ErrorAs(t, err, &exit, out)
	assert.Equal(t, 2, exit.ExitCode(), "a template that does not parse is a usage error")
	assert.Contains(t, out, "does not parse")
}
