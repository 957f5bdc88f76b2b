package factory

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli"
)

const kubeconfig = `apiVersion: v1
kind: Config
current-context: a
clusters:
- name: a
  cluster: {server: "https://a.example.com"}
- name: b
  cluster: {server: "https://b.example.com"}
users:
- name: u
  user: {token: t}
- name: v
  user: {token: tv}
contexts:
- name: a
  context: {cluster: a, user: u, namespace: team-a}
- name: b
  context: {cluster: b, user: u, namespace: team-b}
`

// parse binds the flags of a command that reads an installation to a new
// Factory, and parses args.
func parse(t *testing.T, args ...string) *Factory {
	t.Helper()
	f := New(nil)
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.AddInstallationReaderFlags(fs, InstalledConfigUsage)
	require.NoError(t, fs.Parse(args))
	return f
}

func writeKubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, []byte(kubeconfig), 0o600))
	return path
}

func TestLoadRESTConfig_kubeconfigAndContext(t *testing.T) {
	path := writeKubeconfig(t)
	for name, tc := range map[string]struct {
		context, want string
	}{
		"without --context, the current context": {"", "https://a.example.com"},
		"--context chooses another":              {"b", "https://b.example.com"},
	} {
		t.Run(name, func(t *testing.T) {
			f := parse(t, "--kubeconfig", path, "--context", tc.context)
			rc, err := LoadRESTConfig(f.ConfigFlags.ToRawKubeConfigLoader())
			require.NoError(t, err)
			assert.Equal(t, tc.want, rc.Host)
			assert.InDelta(t, -1, rc.QPS, 0, "client-side rate limiting is off, as with controller-runtime's GetConfig")
		})
	}
	f := parse(t, "--kubeconfig", path, "--context", "c")
	_, err := LoadRESTConfig(f.ConfigFlags.ToRawKubeConfigLoader())
	assert.ErrorContains(t, err, `context "c" does not exist`)
}

// -n/--namespace is kubectl's: the flag, else the kubeconfig context's
// namespace. The installation is there when -n says so, or when its
// Deployment is in the context's namespace; else it is the only
// Deployment of its name in the cluster, or of several the one in the
// shipped namespace; else the shipped namespace.
func TestFactory_FindInstallation(t *testing.T) {
	path := writeKubeconfig(t)
	deployment := func(ns, name string) client.Object {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	for name, tc := range map[string]struct {
		args    []string
		objs    []client.Object
		want    string
		wantErr string
	}{
		"-n, whatever the cluster has": {args: []string{"-n", "guard"}, objs: []client.Object{deployment("team-a", DefaultDeployment)}, want: "guard"},
		"--namespace, with --context":  {args: []string{"--namespace", "guard", "--context", "b"}, want: "guard"},
		"the context's namespace, where the Deployment is": {
			objs: []client.Object{deployment("team-a", DefaultDeployment), deployment("elsewhere", DefaultDeployment)}, want: "team-a"},
		"--context chooses the context, and its namespace": {args: []string{"--context", "b"},
			objs: []client.Object{deployment("team-a", DefaultDeployment), deployment("team-b", DefaultDeployment)}, want: "team-b"},
		"--deployment names the Deployment": {args: []string{"--deployment", "guard"},
			objs: []client.Object{deployment("team-a", DefaultDeployment), deployment("ops", "guard")}, want: "ops"},
		"not in the context's namespace: the only one in the cluster": {
			objs: []client.Object{deployment("ops", DefaultDeployment), deployment("team-a", "other")}, want: "ops"},
		"none anywhere: the shipped namespace": {objs: []client.Object{deployment("team-a", "other")}, want: circuit.DefaultNamespace},
		"several, one in the shipped namespace: that one": {
			objs: []client.Object{deployment("ops-1", DefaultDeployment), deployment(circuit.DefaultNamespace, DefaultDeployment)}, want: circuit.DefaultNamespace},
		"several elsewhere is an error that names them": {
			objs:    []client.Object{deployment("ops-1", DefaultDeployment), deployment("ops-2", DefaultDeployment)},
			wantErr: "Deployments named webhook-guard in namespaces ops-1, ops-2, none in the kubeconfig context's namespace: say which installation with -n/--namespace"},
	} {
		t.Run(name, func(t *testing.T) {
			f := parse(t, append([]string{"--kubeconfig", path}, tc.args...)...)
			f.Client = fake.NewClientBuilder().WithScheme(Scheme).WithObjects(tc.objs...).
				WithIndex(&appsv1.Deployment{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).Build()
			err := f.FindInstallation(context.Background())
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				assert.ErrorAs(t, err, new(cli.UsageError))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, f.GuardNamespace, f.GuardNamespaceSource)
		})
	}

	t.Run("a Deployment that cannot be listed counts as absent", func(t *testing.T) {
		f := parse(t, "--kubeconfig", path)
		// Without the index, the fake client refuses the field selector,
		// as an apiserver refuses a list it does not allow.
		f.Client = fake.NewClientBuilder().WithScheme(Scheme).WithObjects(deployment("ops", DefaultDeployment)).Build()
		require.NoError(t, f.FindInstallation(context.Background()))
		assert.Equal(t, circuit.DefaultNamespace, f.GuardNamespace)
	})
}

const installed = `apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
targets:
- configuration: slow-mutator
  webhook: slow-mutator.example.com
  allowAdmissionWithoutMutation: true
`

func TestFactory_ReadInstalledConfig(t *testing.T) {
	deployment := func(volumes ...corev1.Volume) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "guard", Name: DefaultDeployment}}
		d.Spec.Template.Spec.Volumes = volumes
		return d
	}
	configVolume := corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "webhook-guard-config-abc"}}}}
	configMap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "guard", Name: "webhook-guard-config-abc"}, Data: map[string]string{"config.yaml": installed}}
	for name, tc := range map[string]struct {
		objs    []client.Object
		wantErr string
	}{
		"the ConfigMap the Deployment mounts":   {objs: []client.Object{deployment(configVolume), configMap}},
		"no Deployment":                         {wantErr: "reading the guard's Deployment guard/webhook-guard"},
		"a Deployment without the volume":       {objs: []client.Object{deployment()}, wantErr: `has no ConfigMap volume named "config"`},
		"a volume whose ConfigMap is not there": {objs: []client.Object{deployment(configVolume)}, wantErr: "reading the installed configuration, ConfigMap guard/webhook-guard-config-abc"},
	} {
		t.Run(name, func(t *testing.T) {
			f := New(func(clientcmd.ClientConfig) (*rest.Config, error) { return &rest.Config{}, nil })
			f.GuardNamespace = "guard"
			f.Client = fake.NewClientBuilder().WithScheme(Scheme).WithObjects(tc.objs...).Build()
			err := f.ReadInstalledConfig(context.Background())
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)
				assert.Nil(t, f.Config)
				return
			}
			require.NoError(t, err)
			require.Len(t, f.Config.Targets, 1)
			assert.Equal(t, "ConfigMap guard/webhook-guard-config-abc (mounted by Deployment webhook-guard)", f.ConfigSource)
		})
	}

	t.Run("a --config file wins, and the cluster is not read", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "guard.yaml")
		require.NoError(t, os.WriteFile(path, []byte(installed), 0o600))
		f := New(nil)
		f.ConfigPath = path
		require.NoError(t, f.ReadConfigFile())
		require.NoError(t, f.ReadInstalledConfig(context.Background()), "no client is needed")
		assert.Equal(t, "file "+path, f.ConfigSource)
	})
}

// kubectl's connection flags (k8s.io/cli-runtime's ConfigFlags) apply on
// top of the kubeconfig: --as and --as-group impersonate, --token replaces
// the credentials, --server the address, --cluster and --user choose
// another of the kubeconfig's, the TLS flags set files, --request-timeout
// bounds each request; a malformed timeout is a usage error before any
// request.
func TestFactory_connectionFlagsAsKubectlHasThem(t *testing.T) {
	path := writeKubeconfig(t)
	dir := t.TempDir()
	ca, crt, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for _, p := range []string{ca, crt, key} {
		require.NoError(t, os.WriteFile(p, []byte("the loader only checks that it can read it"), 0o600))
	}
	for name, tc := range map[string]struct {
		args    []string
		check   func(*testing.T, *rest.Config)
		wantErr string
	}{
		"none: the kubeconfig's": {check: func(t *testing.T, rc *rest.Config) {
			assert.Equal(t, "https://a.example.com", rc.Host)
			assert.Equal(t, "t", rc.BearerToken)
			assert.Empty(t, rc.Impersonate.UserName)
			assert.Zero(t, rc.Timeout)
			assert.False(t, rc.Insecure)
		}},
		"--as and --as-group": {args: []string{"--as", "admin@example.com", "--as-group", "platform", "--as-group", "system:masters"}, check: func(t *testing.T, rc *rest.Config) {
			assert.Equal(t, rest.ImpersonationConfig{UserName: "admin@example.com", Groups: []string{"platform", "system:masters"}, Extra: map[string][]string{}}, rc.Impersonate)
		}},
		"--token and --server": {args: []string{"--token", "other", "--server", "https://127.0.0.1:6443"}, check: func(t *testing.T, rc *rest.Config) {
			assert.Equal(t, "other", rc.BearerToken)
			assert.Equal(t, "https://127.0.0.1:6443", rc.Host)
		}},
		"--cluster and --user choose the kubeconfig's others": {args: []string{"--cluster", "b", "--user", "v"}, check: func(t *testing.T, rc *rest.Config) {
			assert.Equal(t, "https://b.example.com", rc.Host)
			assert.Equal(t, "tv", rc.BearerToken)
		}},
		"--certificate-authority, --client-certificate and --client-key": {
			args: []string{"--certificate-authority", ca, "--client-certificate", crt, "--client-key", key},
			check: func(t *testing.T, rc *rest.Config) {
				assert.Equal(t, ca, rc.CAFile)
				assert.Equal(t, crt, rc.CertFile)
				assert.Equal(t, key, rc.KeyFile)
			}},
		"--insecure-skip-tls-verify":            {args: []string{"--insecure-skip-tls-verify"}, check: func(t *testing.T, rc *rest.Config) { assert.True(t, rc.Insecure) }},
		"--request-timeout with a unit":         {args: []string{"--request-timeout", "1m"}, check: func(t *testing.T, rc *rest.Config) { assert.Equal(t, time.Minute, rc.Timeout) }},
		"--request-timeout in seconds":          {args: []string{"--request-timeout", "5"}, check: func(t *testing.T, rc *rest.Config) { assert.Equal(t, 5*time.Second, rc.Timeout) }},
		"--request-timeout that is no duration": {args: []string{"--request-timeout", "soon"}, wantErr: `--request-timeout "soon": want a duration`},
	} {
		t.Run(name, func(t *testing.T) {
			f := New(nil)
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f.AddKubeconfigFlags(fs)
			require.NoError(t, fs.Parse(append([]string{"--kubeconfig", path}, tc.args...)))
			assert.Nil(t, fs.Lookup("namespace"), "a command without an installation takes no -n")
			if tc.wantErr != "" {
				err := f.Complete(context.Background())
				require.ErrorContains(t, err, tc.wantErr)
				assert.ErrorAs(t, err, new(cli.UsageError))
				return
			}
			// What Complete builds its clients from; the files above are
			// no certificates to build them with.
			rc, err := LoadRESTConfig(f.ConfigFlags.ToRawKubeConfigLoader())
			require.NoError(t, err)
			tc.check(t, rc)
		})
	}
}
