package run

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	discoveryfake "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/webhook-guard/webhook-guard/internal/cli"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/internal/cli/version"
)

// noCluster fails the test if the command reaches for a cluster.
func noCluster(t *testing.T) factory.Loader {
	return func(clientcmd.ClientConfig) (*rest.Config, error) {
		t.Fatal("the command reached for the cluster before validating its input")
		return nil, nil
	}
}

const validConfig = `apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
targets:
- configuration: slow-mutator
  webhook: slow-mutator.example.com
  allowAdmissionWithoutMutation: true
`

// parseRunFlags parses args as the flags of "guard run".
func parseRunFlags(args ...string) (*Options, error) {
	o := NewOptions(cli.IOStreams{Out: io.Discard, ErrOut: io.Discard}, factory.New(nil), version.Build{})
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	return o, fs.Parse(args)
}

// A port in use fails the start at once, naming the flag and the address,
// before anything reaches the cluster.
func TestDispatch_aPortInUseIsReportedFirst(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	cfg := filepath.Join(t.TempDir(), "guard.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(validConfig), 0o600))
	for _, flag := range []string{"--metrics-bind-address", "--health-probe-bind-address", "--status-bind-address", "--pprof-bind-address"} {
		t.Run(flag, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := NewCmd(cli.IOStreams{Out: &stdout, ErrOut: &stderr}, factory.New(noCluster(t)), version.Build{})
			cmd.SetArgs([]string{"--config", cfg, "--health-probe-bind-address", "127.0.0.1:0", "--status-bind-address", "0", flag, busy.Addr().String()})
			cmd.SetOut(&stdout)
			cmd.SetErr(&stderr)
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			err := cmd.ExecuteContext(context.Background())
			require.Error(t, err)
			assert.Contains(t, err.Error(), flag+" "+busy.Addr().String()+": cannot listen")
			assert.Contains(t, err.Error(), "address already in use")
		})
	}
}

func TestRunFlags_defaults(t *testing.T) {
	o, err := parseRunFlags()
	require.NoError(t, err)
	assert.Equal(t, "0", o.MetricsAddr)
	assert.Empty(t, o.MetricsCertDir, "a self-signed metrics certificate unless a folder is given")
	assert.Equal(t, ":8081", o.ProbeAddr)
	assert.False(t, o.LeaderElect)
	assert.Equal(t, "webhook-guard-system", o.LeaderElectionNamespace)
	assert.Equal(t, 9443, o.WebhookPort)
	assert.Empty(t, o.WebhookCertDir)
}

func TestRunFlags_statusBindAddressIsLoopbackOnly(t *testing.T) {
	cases := map[string]struct {
		addr    string
		wantErr string
	}{
		"the default, IPv4 loopback":      {addr: "127.0.0.1:8082"},
		"IPv6 loopback":                   {addr: "[::1]:8082"},
		"localhost":                       {addr: "localhost:8082"},
		"off":                             {addr: "0"},
		"every address is refused":        {addr: ":8082", wantErr: `"" is not a loopback address`},
		"the unspecified IP is refused":   {addr: "0.0.0.0:8082", wantErr: `"0.0.0.0" is not a loopback address`},
		"a pod's address is refused":      {addr: "10.0.0.7:8082", wantErr: `"10.0.0.7" is not a loopback address`},
		"a host name is refused":          {addr: "guard.example.com:8082", wantErr: "is not a loopback address"},
		"an address without a port fails": {addr: "127.0.0.1", wantErr: "missing port"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o, err := parseRunFlags("--status-bind-address", tc.addr)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.addr, o.StatusAddr)
		})
	}
	o, err := parseRunFlags()
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:8082", o.StatusAddr)
}

// The zap flags of the e2e harness ("--zap-log-level debug") and the
// Deployment's flags parse as before.
func TestRunFlags_takesTheFlagsItsCallersPass(t *testing.T) {
	o, err := parseRunFlags("--kubeconfig", "kc", "--config", "c.yaml", "--zap-log-level", "debug", "--leader-elect",
		"--leader-election-namespace=ns", "--cert-secret=", "--webhook-cert-dir=/tmp/certs")
	require.NoError(t, err)
	assert.Equal(t, "kc", *o.ConfigFlags.KubeConfig)
	assert.Equal(t, "c.yaml", o.ConfigPath)
	assert.True(t, o.LeaderElect)
	assert.Equal(t, "ns", o.LeaderElectionNamespace)
	assert.Empty(t, o.Certs.SecretName)
	assert.Equal(t, "/tmp/certs", o.WebhookCertDir)
	assert.NotNil(t, o.Zap.Level, "--zap-log-level reaches the zap options")
}

// Marking is available only where the apiserver serves both marking kinds;
// where it does not, the service starts without them (and its cache is not
// told about kinds it cannot map, which failed the start before).
func TestMarkingUnavailable_servedKinds(t *testing.T) {
	gv := admissionregistrationv1.SchemeGroupVersion.String()
	withKinds := func(kinds ...string) []*metav1.APIResourceList {
		list := &metav1.APIResourceList{GroupVersion: gv}
		for _, k := range kinds {
			list.APIResources = append(list.APIResources, metav1.APIResource{Kind: k})
		}
		return []*metav1.APIResourceList{list}
	}
	for name, tc := range map[string]struct {
		resources []*metav1.APIResourceList
		problem   string
	}{
		"both served":      {withKinds("MutatingWebhookConfiguration", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"), ""},
		"binding missing":  {withKinds("MutatingWebhookConfiguration", "MutatingAdmissionPolicy"), "MutatingAdmissionPolicyBinding"},
		"policy missing":   {withKinds("MutatingWebhookConfiguration"), "MutatingAdmissionPolicy:"},
		"group not served": {nil, "does not serve admissionregistration.k8s.io/v1:"},
	} {
		t.Run(name, func(t *testing.T) {
			d := &discoveryfake.FakeDiscovery{Fake: &k8stesting.Fake{Resources: tc.resources}}
			problem, err := markingUnavailable(t.Context(), d)
			require.NoError(t, err)
			if tc.problem == "" {
				assert.Empty(t, problem)
				assert.Len(t, cacheByObject(true), 4)
				return
			}
			assert.Contains(t, problem, tc.problem)
			assert.Len(t, cacheByObject(false), 2, "no cache entry for a kind the apiserver does not serve")
		})
	}
}

func TestMarkingUnavailable_aDiscoveryErrorFailsTheStart(t *testing.T) {
	f := &k8stesting.Fake{}
	f.AddReactor("get", "resource", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	_, err := markingUnavailable(t.Context(), &discoveryfake.FakeDiscovery{Fake: f})
	require.ErrorContains(t, err, "connection refused")
}

// The Lease renewals get a connection of their own: a request through
// the manager's configuration and one through leaseConfig, one after the
// other, open two connections to the apiserver, where two clients of one
// configuration share one.
func TestLeaseConfig_renewalsHaveTheirOwnConnection(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"l"}}`)
	}))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()
	rc := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}

	get := func(c *rest.Config) {
		t.Helper()
		cs, err := kubernetes.NewForConfig(c)
		require.NoError(t, err)
		_, err = cs.CoordinationV1().Leases("ns").Get(t.Context(), "l", metav1.GetOptions{})
		require.NoError(t, err)
	}
	get(rc)
	get(rest.CopyConfig(rc))
	require.EqualValues(t, 1, conns.Load(), "two clients of one configuration share the connection")
	get(leaseConfig(rc))
	assert.EqualValues(t, 2, conns.Load(), "the Lease client opened a connection of its own")
}
