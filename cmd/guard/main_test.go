package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// noCluster fails the test if a command tries to reach a cluster.
func noCluster(t *testing.T) factory.Loader {
	return func(clientcmd.ClientConfig) (*rest.Config, error) {
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

const validConfig = `apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
targets:
- configuration: slow-mutator
  webhook: slow-mutator.example.com
  allowAdmissionWithoutMutation: true
`

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
		"run with an unknown flag is a usage error": {[]string{"run", "--confg", bad}, 2, "unknown flag: --confg"},
		"run with a missing file names the file": {[]string{"run", "--config", "/nonexistent/guard.yaml"}, 1,
			"reading configuration: open /nonexistent/guard.yaml: no such file or directory"},
		"run with an unapproved target names the file, field and value": {[]string{"run", "--config", bad}, 1,
			bad + ": invalid GuardConfiguration: targets[0].allowAdmissionWithoutMutation: Required value"},
		"status with a bad configuration touches nothing":    {[]string{"status", "--config", bad}, 1, "allowAdmissionWithoutMutation: Required value"},
		"status with an unknown output is a usage error":     {[]string{"status", "--output", "wide"}, 2, `-o "wide": must be table, json or yaml`},
		"unmutated with an unknown output is a usage error":  {[]string{"unmutated", "-o", "wide"}, 2, `-o "wide": must be table, json or yaml`},
		"unmutated with a bad configuration touches nothing": {[]string{"unmutated", "--config", bad}, 1, "allowAdmissionWithoutMutation: Required value"},
		"release without --all or a target is a usage error": {[]string{"release"}, 2, "give --all, or the CONFIGURATION[/WEBHOOK] to release"},
		"release with --all and a target is a usage error":   {[]string{"release", "--all", "a/b"}, 2, "not both"},
		"release with a bad configuration touches nothing":   {[]string{"release", "--all", "--config", bad}, 1, "allowAdmissionWithoutMutation: Required value"},
		"manifests with an unknown kind is a usage error":    {[]string{"manifests", "crd"}, 2, `want "static", "policy", "rbac" or "marking"`},
		"manifests static without --url is a usage error":    {[]string{"manifests", "static", "--config", writeConfig(t, validConfig)}, 2, "--url and --ca-file are required"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tc.args, &stdout, &stderr, noCluster(t), "guard")
			require.Error(t, err)
			assert.Equal(t, tc.wantCode, exitCode(err))
			assert.Contains(t, err.Error(), tc.wantErr)
			assert.Empty(t, stdout.String())
		})
	}
}

func TestDispatch_versionAndHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"version"}, &stdout, &stderr, noCluster(t), "guard"))
	assert.Contains(t, stdout.String(), "webhook-guard ")

	for _, help := range [][]string{{"--help"}, {"help"}, {"-h"}} {
		stdout.Reset()
		require.NoError(t, run(context.Background(), help, &stdout, &stderr, noCluster(t), "guard"))
		for _, cmd := range []string{"run", "status", "webhooks", "unmutated", "release", "manifests static", "version"} {
			assert.Contains(t, stdout.String(), cmd, "%v", help)
		}
	}

	// Each command's help names its flags, -o and --output both.
	for _, cmd := range []string{"status", "unmutated"} {
		stdout.Reset()
		require.NoError(t, run(context.Background(), []string{cmd, "--help"}, &stdout, &stderr, noCluster(t), "guard"))
		for _, flag := range []string{"-o, --output", "-n, --namespace", "--kubeconfig", "--context", "--deployment", "--config", "--exit-code"} {
			assert.Contains(t, stdout.String(), flag, cmd)
		}
	}
}

func TestExitCode(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		want int
	}{
		"a failure is 1":     {errors.New("boom"), 1},
		"a usage error is 2": {fmt.Errorf("wrapped: %w", cli.UsageError{Err: errors.New("bad flag")}), 2},
		"a command's exit error carries its own code": {cli.ExitError{Code: 3, Err: errors.New("no leader")}, 3},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, exitCode(tc.err))
		})
	}
}

// As the kubectl plugin kubectl-guard the binary names itself "kubectl
// guard" in its help, and "guard completion" writes a shell's completion.
func TestRun_pluginNameAndCompletion(t *testing.T) {
	assert.Equal(t, "kubectl guard", displayName("/usr/local/bin/kubectl-guard"))
	assert.Equal(t, "guard", displayName("bin/guard"))
	var stdout, stderr strings.Builder
	require.NoError(t, run(context.Background(), []string{"status", "--help"}, &stdout, &stderr, noCluster(t), displayName("kubectl-guard")))
	assert.Contains(t, stdout.String(), "kubectl guard status")
	for _, shell := range []string{"bash", "zsh", "fish"} {
		stdout.Reset()
		require.NoError(t, run(context.Background(), []string{"completion", shell}, &stdout, &stderr, noCluster(t), "guard"), shell)
		assert.Contains(t, stdout.String(), "guard", shell)
		assert.Greater(t, stdout.Len(), 1000, "%s: a completion script", shell)
	}
}
