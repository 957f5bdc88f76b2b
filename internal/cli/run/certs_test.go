package run

import (
	"crypto/x509"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/webhook-guard/webhook-guard/certs"
)

func parseCertFlags(t *testing.T, args ...string) (CertOptions, error) {
	t.Helper()
	var o CertOptions
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	return o, fs.Parse(args)
}

func TestAddCertFlags_defaults(t *testing.T) {
	o, err := parseCertFlags(t)
	require.NoError(t, err)
	assert.Equal(t, CertOptions{
		SecretName: "webhook-guard-certs", Namespace: "webhook-guard-system", ServiceName: "webhook-guard",
		Validity: 2160 * time.Hour, CheckInterval: time.Minute,
	}, o)
}

func TestAddCertFlags_extraSANs(t *testing.T) {
	cases := map[string]struct {
		args    []string
		want    string
		wantErr string
	}{
		"names and addresses are split on commas": {
			args: []string{"--cert-extra-sans", "guard.example.com, 127.0.0.1,::1"},
			want: "guard.example.com,127.0.0.1,::1",
		},
		"a repeated flag adds to the list": {
			args: []string{"--cert-extra-sans", "a.example.com", "--cert-extra-sans", "10.0.0.1"},
			want: "a.example.com,10.0.0.1",
		},
		"an empty entry is refused": {
			args:    []string{"--cert-extra-sans", "a.example.com,"},
			wantErr: "empty name in the list",
		},
		"something that is neither a name nor an address is refused": {
			args:    []string{"--cert-extra-sans", "Not_A_Host"},
			wantErr: `"Not_A_Host" is neither an IP address nor a DNS name`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o, err := parseCertFlags(t, tc.args...)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, o.ExtraSANs.String())
		})
	}
}

// addOnly is a manager.Manager that only records what is added to it;
// setupCerts must call nothing else when given a client.
type addOnly struct {
	manager.Manager
	added []manager.Runnable
}

func (m *addOnly) Add(r manager.Runnable) error {
	m.added = append(m.added, r)
	return nil
}

func TestSetupCerts_off(t *testing.T) {
	cases := map[string]struct {
		secret, certDir string
	}{
		"an empty --cert-secret leaves the certificate to someone else":  {secret: "", certDir: t.TempDir()},
		"an empty --webhook-cert-dir means there is no webhook to serve": {secret: "webhook-guard-certs", certDir: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o, err := parseCertFlags(t, "--cert-secret", tc.secret)
			require.NoError(t, err)
			c := fake.NewClientBuilder().Build()
			mgr := &addOnly{}
			require.NoError(t, setupCerts(t.Context(), mgr, c, tc.certDir, o))
			assert.Empty(t, mgr.added)
			var list corev1.SecretList
			require.NoError(t, c.List(t.Context(), &list))
			assert.Empty(t, list.Items, "no Secret may be created")
		})
	}
}

func TestSetupCerts_preparesCertDirBeforeStartAndAddsRotation(t *testing.T) {
	o, err := parseCertFlags(t, "--cert-namespace", "ns", "--cert-service-name", "svc", "--cert-secret", "s",
		"--cert-validity", "48h", "--cert-extra-sans", "guard.example.com,127.0.0.1")
	require.NoError(t, err)
	c := fake.NewClientBuilder().Build()
	mgr := &addOnly{}
	dir := t.TempDir()

	require.NoError(t, setupCerts(t.Context(), mgr, c, dir, o))

	var s corev1.Secret
	require.NoError(t, c.Get(t.Context(), types.NamespacedName{Namespace: "ns", Name: "s"}, &s))
	served, err := os.ReadFile(filepath.Join(dir, "tls.crt"))
	require.NoError(t, err)
	assert.Equal(t, s.Data[certs.TLSCertKey], served, "the webhook server starts with the Secret's certificate")
	block, _ := pem.Decode(served)
	require.NotNil(t, block)
	leaf, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"svc.ns.svc", "svc.ns.svc.cluster.local", "guard.example.com"}, leaf.DNSNames)
	require.Len(t, leaf.IPAddresses, 1)
	assert.Equal(t, "127.0.0.1", leaf.IPAddresses[0].String())
	assert.WithinDuration(t, time.Now().Add(48*time.Hour), leaf.NotAfter, time.Minute, "--cert-validity")

	require.Len(t, mgr.added, 1)
	rotation, ok := mgr.added[0].(*certs.Manager)
	require.True(t, ok, "the rotation runs as a certs.Manager, got %T", mgr.added[0])
	assert.False(t, rotation.NeedLeaderElection(), "every replica keeps its own CertDir fresh")
}

func TestSetupCerts_refusesBadFlagsBeforeTouchingTheCluster(t *testing.T) {
	o, err := parseCertFlags(t, "--cert-validity", "24h", "--cert-rotate-before", "24h")
	require.NoError(t, err)
	c := fake.NewClientBuilder().Build()
	mgr := &addOnly{}
	err = setupCerts(t.Context(), mgr, c, t.TempDir(), o)
	require.ErrorContains(t, err, "rotate-before 24h0m0s must be positive and shorter than the validity 24h0m0s")
	assert.Empty(t, mgr.added)
	var list corev1.SecretList
	require.NoError(t, c.List(t.Context(), &list))
	assert.Empty(t, list.Items)
}

func TestCheckMetricsCert_needsAPairInAFolderThatIsSet(t *testing.T) {
	ca, err := certs.NewCA("test", time.Hour)
	require.NoError(t, err)
	pair, err := ca.Issue([]string{"webhook-guard.webhook-guard-system.svc"}, nil, time.Hour)
	require.NoError(t, err)
	withPair := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(withPair, certs.TLSCertKey), pair.CertPEM, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(withPair, certs.TLSKeyKey), pair.KeyPEM, 0o600))
	onlyCert := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(onlyCert, certs.TLSCertKey), pair.CertPEM, 0o600))

	cases := map[string]struct {
		dir     string
		wantErr string
	}{
		"no folder: the self-signed certificate":                   {dir: ""},
		"a folder with the pair, as a mounted cert-manager Secret": {dir: withPair},
		"an empty folder is refused, not served self-signed":       {dir: t.TempDir(), wantErr: "no certificate to serve metrics with"},
		"a folder with the certificate but no key is refused":      {dir: onlyCert, wantErr: "tls.key"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := checkMetricsCert(tc.dir)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
			assert.ErrorContains(t, err, "--metrics-cert-dir "+tc.dir, "the error names the flag and the folder")
		})
	}
}
