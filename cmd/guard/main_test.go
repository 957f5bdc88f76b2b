package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
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

const completionKubeconfig = `apiVersion: v1
kind: Config
current-context: prod-eu
clusters:
- name: eu
  cluster: {server: "https://eu.example.com"}
- name: us
  cluster: {server: "https://us.example.com"}
users:
- name: admin
  user: {token: a}
- name: reader
  user: {token: r}
contexts:
- name: prod-eu
  context: {cluster: eu, user: admin}
- name: prod-us
  context: {cluster: us, user: admin}
- name: staging
  context: {cluster: eu, user: reader}
`

// complete runs cobra's hidden __complete command, as the shells' scripts
// do, and returns the completions it offers and its directive line.
func complete(t *testing.T, load factory.Loader, args ...string) []string {
	t.Helper()
	var stdout, stderr strings.Builder
	require.NoError(t, run(context.Background(), append([]string{"__complete"}, args...), &stdout, &stderr, load, "guard"), stderr.String())
	return strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
}

// --context, --cluster and --user complete, as in kubectl, to the names in
// the kubeconfig that --kubeconfig (or $KUBECONFIG) names, on every
// command that reaches a cluster, without reaching it.
func TestRun_completesContextsClustersAndUsersFromTheKubeconfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, []byte(completionKubeconfig), 0o600))
	noFiles := ":4" // cobra.ShellCompDirectiveNoFileComp
	for name, tc := range map[string]struct {
		args []string
		want []string
	}{
		"every context":                   {[]string{"status", "--kubeconfig", path, "--context", ""}, []string{"prod-eu", "prod-us", "staging", noFiles}},
		"the contexts with a prefix":      {[]string{"status", "--kubeconfig", path, "--context", "prod"}, []string{"prod-eu", "prod-us", noFiles}},
		"release's contexts":              {[]string{"release", "--kubeconfig", path, "--context", "st"}, []string{"staging", noFiles}},
		"webhooks' contexts":              {[]string{"webhooks", "--kubeconfig", path, "--context", ""}, []string{"prod-eu", "prod-us", "staging", noFiles}},
		"unmutated's contexts":            {[]string{"unmutated", "--kubeconfig", path, "--context", "prod-u"}, []string{"prod-us", noFiles}},
		"run's contexts":                  {[]string{"run", "--kubeconfig", path, "--context", ""}, []string{"prod-eu", "prod-us", "staging", noFiles}},
		"the clusters":                    {[]string{"status", "--kubeconfig", path, "--cluster", ""}, []string{"eu", "us", noFiles}},
		"the users":                       {[]string{"status", "--kubeconfig", path, "--user", "r"}, []string{"reader", noFiles}},
		"a kubeconfig that is not there":  {[]string{"status", "--kubeconfig", path + ".missing", "--context", ""}, []string{noFiles}},
		"--kubeconfig=PATH, in one piece": {[]string{"status", "--kubeconfig=" + path, "--context", "s"}, []string{"staging", noFiles}},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, complete(t, noCluster(t), tc.args...))
		})
	}
	t.Run("$KUBECONFIG, as kubectl reads it", func(t *testing.T) {
		t.Setenv("KUBECONFIG", path)
		assert.Equal(t, []string{"prod-eu", "prod-us", noFiles}, complete(t, noCluster(t), "status", "--context", "p"))
	})
}

// Namespaces and configuration names come from the cluster (proven against
// a real apiserver in test/e2e); without one, they complete to nothing,
// not to an error or to file names.
func TestRun_completesNothingFromAClusterItCannotReach(t *testing.T) {
	unreachable := func(clientcmd.ClientConfig) (*rest.Config, error) { return nil, errors.New("no cluster here") }
	assert.Equal(t, []string{":4"}, complete(t, unreachable, "status", "-n", ""))
	assert.Equal(t, []string{":4"}, complete(t, unreachable, "release", ""))
}

// -v sets klog's verbosity as in kubectl: at 6, client-go logs every
// request with its response status, on stderr; each invocation starts at
// 0 again.
func TestRun_verbosityIsKlogs(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`, http.StatusNotFound)
	}))
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
current-context: c
clusters: [{name: c, cluster: {server: "`+srv.URL+`"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
`), 0o600))
	cfg := writeConfig(t, validConfig)
	status := func(args ...string) string {
		var stdout, stderr strings.Builder
		_ = run(context.Background(), append([]string{"status", "--kubeconfig", path, "--config", cfg, "-n", "guard"}, args...), &stdout, &stderr, factory.LoadRESTConfig, "guard")
		return stderr.String()
	}
	// The first request the client makes: discovery of the API groups.
	request := `url="` + srv.URL + `/apis"`
	assert.NotContains(t, status(), request, "-v 0 logs no request")
	for _, v := range [][]string{{"-v", "6"}, {"-v=6"}, {"--v", "6"}} {
		stderr := status(v...)
		assert.Regexp(t, `(?m)^I\d{4} .*"Response".*verb="GET" `+regexp.QuoteMeta(request)+` status="404 Not Found"`, stderr, v)
	}
	assert.NotContains(t, status(), request, "the next invocation starts at 0")
}
