package harness

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// HelmResult is one run of helm.
type HelmResult struct {
	Stdout, Stderr string
	Err            error
}

// RunHelm runs the helm binary bin in dir with the control plane's admin
// kubeconfig, in a helm home of its own under home (cache, config and
// data), so that runs share no repositories, registries or plugins.
func (e *Env) RunHelm(ctx context.Context, bin, dir, home string, args ...string) HelmResult {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+e.KubeconfigPath,
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return HelmResult{Stdout: stdout.String(), Stderr: stderr.String(), Err: err}
}
