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
contexts:
- name: a
  context: {cluster: a, user: u, namespace: team-a}
- name: b
  context: {cluster: b, user: u, namespace: team-b}
`

func TestLoadRESTConfig_kubeconfigAndContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, []byte(kubeconfig), 0o600))
	for name, tc := range map[string]struct {
		context, want string
	}{
		"without --context, the current context": {"", "https://a.example.com"},
		"--context chooses another":              {"b", "https://b.example.com"},
	} {
		t.Run(name, func(t *testing.T) {
			rc, err := LoadRESTConfig(path, tc.context)
			require.NoError(t, err)
			assert.Equal(t, tc.want, rc.Host)
			assert.InDelta(t, -1, rc.QPS, 0, "client-side rate limiting is off, as with controller-runtime's GetConfig")
		})
	}
	_, err := LoadRESTConfig(path, "c")
	assert.ErrorContains(t, err, `context "c" does not exist`)
}

// -n/--namespace is the installation's namespace: circuit.DefaultNamespace
// unless given, whatever the kubeconfig context's namespace is.
func TestFactory_namespaceIsTheInstallations(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"the default, not the context's": {nil, circuit.DefaultNamespace},
		"-n":                             {[]string{"-n", "guard"}, "guard"},
		"--namespace":                    {[]string{"--namespace", "guard"}, "guard"},
	} {
		t.Run(name, func(t *testing.T) {
			f := New(nil)
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f.AddInstallationFlags(fs)
			f.AddKubeconfigFlags(fs)
			require.NoError(t, fs.Parse(append(tc.args, "--context", "b")))
			assert.Equal(t, tc.want, f.Namespace)
			assert.Equal(t, DefaultDeployment, f.Deployment)
		})
	}
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
			f := New(func(string, string) (*rest.Config, error) { return &rest.Config{}, nil })
			f.Namespace = "guard"
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

// kubectl's connection flags apply on top of the kubeconfig: --as and
// --as-group impersonate, --token replaces the credentials, --server the
// address, --request-timeout bounds each request; a malformed timeout is a
// usage error before any request.
func TestFactory_connectionFlagsAsKubectlHasThem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, []byte(kubeconfig), 0o600))
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
		}},
		"--as and --as-group": {args: []string{"--as", "admin@example.com", "--as-group", "platform", "--as-group", "system:masters"}, check: func(t *testing.T, rc *rest.Config) {
			assert.Equal(t, rest.ImpersonationConfig{UserName: "admin@example.com", Groups: []string{"platform", "system:masters"}}, rc.Impersonate)
		}},
		"--token and --server": {args: []string{"--token", "other", "--server", "https://127.0.0.1:6443"}, check: func(t *testing.T, rc *rest.Config) {
			assert.Equal(t, "other", rc.BearerToken)
			assert.Equal(t, "https://127.0.0.1:6443", rc.Host)
		}},
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
			err := f.Complete()
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				assert.ErrorAs(t, err, new(cli.UsageError))
				return
			}
			require.NoError(t, err)
			tc.check(t, f.RESTConfig)
		})
	}
}
