package certs

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

const (
	testNamespace = "guard-ns"
	testService   = "guard"
	testSecret    = "guard-certs"
)

var secretKey = types.NamespacedName{Namespace: testNamespace, Name: testSecret}

func testOptions(clk *clocktesting.FakeClock, certDir string) Options {
	return Options{
		Namespace: testNamespace, SecretName: testSecret, ServiceName: testService,
		ExtraIPs: []net.IP{net.ParseIP("127.0.0.1")},
		CertDir:  certDir, Clock: clk,
	}
}

// wantedNames are what testOptions' certificate must be valid for.
var wantedNames = []string{"guard.guard-ns.svc", "guard.guard-ns.svc.cluster.local", "127.0.0.1"}

// logs collects log lines so that a test can check what a person reads.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) context(t *testing.T) context.Context {
	sink := funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 1})
	return logf.IntoContext(t.Context(), sink)
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func getSecret(t *testing.T, c client.Reader) *corev1.Secret {
	t.Helper()
	var s corev1.Secret
	require.NoError(t, c.Get(t.Context(), secretKey, &s))
	return &s
}

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	require.NotNil(t, block, "no PEM block in %q", certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return cert
}

// requireValidFor checks that certPEM chains to caPEM at now for every name.
func requireValidFor(t *testing.T, caPEM, certPEM []byte, now time.Time, names ...string) {
	t.Helper()
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	leaf := parseCert(t, certPEM)
	for _, name := range names {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, CurrentTime: now})
		require.NoError(t, err, name)
	}
}

// requireCertDirHolds checks that dir holds the Secret's pair, with the
// key readable by its owner only and no temporary file left behind.
func requireCertDirHolds(t *testing.T, dir string, s *corev1.Secret) {
	t.Helper()
	cert, err := os.ReadFile(filepath.Join(dir, CertFile))
	require.NoError(t, err)
	key, err := os.ReadFile(filepath.Join(dir, KeyFile))
	require.NoError(t, err)
	assert.Equal(t, s.Data[TLSCertKey], cert, "tls.crt")
	assert.Equal(t, s.Data[TLSKeyKey], key, "tls.key")
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "tls.key mode")
	requireNoLeftovers(t, dir)
}

// requireNoLeftovers checks that dir holds the served names, the ..data
// link and the one folder it points to, and no temporary file.
func requireNoLeftovers(t *testing.T, dir string) {
	t.Helper()
	current, err := os.Readlink(filepath.Join(dir, dataLink))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(current, dataDirPrefix), current)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{CertFile, KeyFile, dataLink, current}, names, "CertDir must hold the pair and nothing else")
	entries, err = os.ReadDir(filepath.Join(dir, current))
	require.NoError(t, err)
	names = nil
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{CertFile, KeyFile}, names)
}

func TestManager_Ensure_firstStartCreatesSecretAndCertDir(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	c := fake.NewClientBuilder().Build()
	dir := filepath.Join(t.TempDir(), "certs")
	m := &Manager{Client: c, Options: testOptions(clk, dir)}

	caPEM, err := m.Ensure(t.Context())
	require.NoError(t, err)

	s := getSecret(t, c)
	assert.Equal(t, corev1.SecretTypeTLS, s.Type)
	assert.Equal(t, caPEM, s.Data[CACertKey])
	assert.NotEmpty(t, s.Data[CAKeyKey])
	requireValidFor(t, caPEM, s.Data[TLSCertKey], clk.Now(), wantedNames...)
	leaf := parseCert(t, s.Data[TLSCertKey])
	assert.Equal(t, clk.Now().Add(DefaultValidity).Unix(), leaf.NotAfter.Unix(), "default validity is 90 days")
	assert.Equal(t, clk.Now().Add(DefaultCAValidity).Unix(), parseCert(t, caPEM).NotAfter.Unix(), "default CA validity is 10 years")
	requireCertDirHolds(t, dir, s)
}

func TestManager_Ensure_restartReusesSecret(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	c := fake.NewClientBuilder().Build()
	dir := t.TempDir()
	first := &Manager{Client: c, Options: testOptions(clk, dir)}
	caPEM, err := first.Ensure(t.Context())
	require.NoError(t, err)
	before := getSecret(t, c)
	old := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) // os.Chtimes follows the links to the served files.
	for _, f := range []string{CertFile, KeyFile} {
		require.NoError(t, os.Chtimes(filepath.Join(dir, f), old, old))
	}
	clk.Step(24 * time.Hour)

	t.Run("same CertDir: nothing is written", func(t *testing.T) {
		restarted := &Manager{Client: c, Options: testOptions(clk, dir)}
		got, err := restarted.Ensure(t.Context())
		require.NoError(t, err)
		assert.Equal(t, caPEM, got)
		after := getSecret(t, c)
		assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "the Secret must not be written")
		assert.Equal(t, before.Data, after.Data)
		for _, f := range []string{CertFile, KeyFile} {
			fi, err := os.Stat(filepath.Join(dir, f))
			require.NoError(t, err)
			assert.True(t, fi.ModTime().Equal(old), "%s must not be rewritten", f)
		}
	})
	t.Run("new replica with an empty CertDir: the Secret's pair is copied", func(t *testing.T) {
		otherDir := t.TempDir()
		replica := &Manager{Client: c, Options: testOptions(clk, otherDir)}
		got, err := replica.Ensure(t.Context())
		require.NoError(t, err)
		assert.Equal(t, caPEM, got)
		after := getSecret(t, c)
		assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "the Secret must not be written")
		requireCertDirHolds(t, otherDir, after)
	})
}

func TestManager_Ensure_racingCreatesConvergeOnOneSecret(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	dirA, dirB := t.TempDir(), t.TempDir()
	var winner *Manager
	creates, refused := 0, 0
	// B has read NotFound; before its Create reaches the apiserver, A
	// creates the Secret, so B's Create fails with AlreadyExists.
	c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			creates++
			if creates == 1 {
				winner = &Manager{Client: c, Options: testOptions(clk, dirA)}
				_, err := winner.Ensure(ctx)
				require.NoError(t, err)
			}
			err := c.Create(ctx, obj, opts...)
			if apierrors.IsAlreadyExists(err) {
				refused++
			}
			return err
		},
	}).Build()
	loser := &Manager{Client: c, Options: testOptions(clk, dirB)}

	caPEM, err := loser.Ensure(t.Context())
	require.NoError(t, err)

	require.NotNil(t, winner)
	assert.Equal(t, 1, creates, "the loser must try to create once, then use the winner's Secret")
	assert.Equal(t, 1, refused, "the loser's Create must have been refused")
	s := getSecret(t, c)
	assert.Equal(t, s.Data[CACertKey], caPEM, "the loser must return the winner's CA")
	requireCertDirHolds(t, dirA, s)
	requireCertDirHolds(t, dirB, s)
}

func TestManager_Ensure_racingUpdatesConvergeOnOneCertificate(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	dirA, dirB := t.TempDir(), t.TempDir()
	setup := fake.NewClientBuilder().Build()
	_, err := (&Manager{Client: setup, Options: testOptions(clk, t.TempDir())}).Ensure(t.Context())
	require.NoError(t, err)
	initial := getSecret(t, setup)
	clk.Step(DefaultValidity - DefaultValidity/3 + time.Hour)

	updates, conflicts := 0, 0
	// Both replicas find the certificate due; A's update lands between B's
	// read and B's update, so B's update conflicts.
	c := fake.NewClientBuilder().WithObjects(initial.DeepCopy()).WithInterceptorFuncs(interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			updates++
			if updates == 1 {
				_, err := (&Manager{Client: c, Options: testOptions(clk, dirA)}).Ensure(ctx)
				require.NoError(t, err)
			}
			err := c.Update(ctx, obj, opts...)
			if apierrors.IsConflict(err) {
				conflicts++
			}
			return err
		},
	}).Build()
	loser := &Manager{Client: c, Options: testOptions(clk, dirB)}

	caPEM, err := loser.Ensure(t.Context())
	require.NoError(t, err)

	assert.Equal(t, 1, conflicts, "the loser's update must have been refused")
	assert.Equal(t, 1, updates, "the loser must then use the winner's certificate, not write its own")
	s := getSecret(t, c)
	assert.Equal(t, initial.Data[CACertKey], caPEM, "rotation keeps the CA")
	assert.NotEqual(t, initial.Data[TLSCertKey], s.Data[TLSCertKey], "the certificate was rotated")
	requireCertDirHolds(t, dirA, s)
	requireCertDirHolds(t, dirB, s)
}

func TestManager_Ensure_replacesWhatCannotBeServed(t *testing.T) {
	otherCA, err := NewCA("someone else", time.Hour*24*365)
	require.NoError(t, err)
	otherPair, err := otherCA.Issue(wantedNames[:2], []net.IP{net.ParseIP("127.0.0.1")}, DefaultValidity)
	require.NoError(t, err)

	cases := map[string]struct {
		// change breaks the Secret, moves the clock or changes the options.
		change func(s *corev1.Secret, clk *clocktesting.FakeClock, o *Options)
		newCA  bool
		// logged is part of the reason a person reads in the log.
		logged string
	}{
		"a serving certificate inside the rotation window is re-issued from the same CA": {
			change: func(_ *corev1.Secret, clk *clocktesting.FakeClock, _ *Options) {
				clk.Step(DefaultValidity - DefaultValidity/3 + time.Minute)
			},
			logged: "less than 720h0m0s from now",
		},
		"an expired serving certificate is re-issued from the same CA": {
			change: func(_ *corev1.Secret, clk *clocktesting.FakeClock, _ *Options) {
				clk.Step(DefaultValidity + time.Hour)
			},
			logged: "does not verify against the Secret's CA",
		},
		"a serving certificate lacking a wanted DNS name is re-issued from the same CA": {
			change: func(_ *corev1.Secret, _ *clocktesting.FakeClock, o *Options) {
				o.ExtraDNSNames = []string{"guard.example.com"}
			},
			logged: `not valid for \"guard.example.com\"`,
		},
		"a serving certificate lacking a wanted IP is re-issued from the same CA": {
			change: func(_ *corev1.Secret, _ *clocktesting.FakeClock, o *Options) {
				o.ExtraIPs = append(o.ExtraIPs, net.ParseIP("10.0.0.1"))
			},
			logged: "not valid for IP 10.0.0.1",
		},
		"a serving certificate signed by another CA is re-issued from the Secret's CA": {
			change: func(s *corev1.Secret, _ *clocktesting.FakeClock, _ *Options) {
				s.Data[TLSCertKey], s.Data[TLSKeyKey] = otherPair.CertPEM, otherPair.KeyPEM
			},
			logged: "does not verify against the Secret's CA",
		},
		"garbage in tls.crt is replaced from the same CA": {
			change: func(s *corev1.Secret, _ *clocktesting.FakeClock, _ *Options) {
				s.Data[TLSCertKey] = []byte("not a certificate")
			},
			logged: "the serving certificate and key are unusable",
		},
		"a tls.key that does not match tls.crt is replaced from the same CA": {
			change: func(s *corev1.Secret, _ *clocktesting.FakeClock, _ *Options) {
				s.Data[TLSKeyKey] = otherPair.KeyPEM
			},
			logged: "private key does not match public key",
		},
		"garbage in ca.crt is replaced by a new CA": {
			change: func(s *corev1.Secret, _ *clocktesting.FakeClock, _ *Options) {
				s.Data[CACertKey] = []byte("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n")
			},
			newCA:  true,
			logged: "the Secret's CA is unusable",
		},
		"a ca.key of another CA is replaced by a new CA": {
			change: func(s *corev1.Secret, _ *clocktesting.FakeClock, _ *Options) {
				s.Data[CAKeyKey] = otherCA.KeyPEM
			},
			newCA:  true,
			logged: "the Secret's CA is unusable",
		},
		"a Secret without ca.key, as another tool may write it, gets a new CA": {
			change: func(s *corev1.Secret, _ *clocktesting.FakeClock, _ *Options) {
				delete(s.Data, CAKeyKey)
			},
			newCA:  true,
			logged: "the Secret holds no CA certificate and key",
		},
		"an empty Secret gets a new CA": {
			change: func(s *corev1.Secret, _ *clocktesting.FakeClock, _ *Options) {
				s.Data = nil
			},
			newCA:  true,
			logged: "the Secret holds no CA certificate and key",
		},
		"a CA that expires within a serving certificate's validity is replaced": {
			change: func(_ *corev1.Secret, clk *clocktesting.FakeClock, _ *Options) {
				clk.Step(DefaultCAValidity - DefaultValidity + time.Hour)
			},
			newCA:  true,
			logged: "before a new serving certificate would",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Now())
			c := fake.NewClientBuilder().Build()
			dir := t.TempDir()
			_, err := (&Manager{Client: c, Options: testOptions(clk, dir)}).Ensure(t.Context())
			require.NoError(t, err)
			before := getSecret(t, c)

			broken := before.DeepCopy()
			opts := testOptions(clk, dir)
			tc.change(broken, clk, &opts)
			require.NoError(t, c.Update(t.Context(), broken))
			broken = getSecret(t, c)

			var l logs
			m := &Manager{Client: c, Options: opts}
			caPEM, err := m.Ensure(l.context(t))
			require.NoError(t, err)

			after := getSecret(t, c)
			assert.NotEqual(t, broken.ResourceVersion, after.ResourceVersion, "the Secret must be updated")
			assert.NotEqual(t, before.Data[TLSCertKey], after.Data[TLSCertKey], "a new serving certificate")
			assert.Equal(t, caPEM, after.Data[CACertKey])
			if tc.newCA {
				assert.NotEqual(t, before.Data[CACertKey], caPEM, "a new CA")
				assert.Contains(t, l.String(), "every caBundle holding the old CA must be updated")
			} else {
				assert.Equal(t, before.Data[CACertKey], caPEM, "the same CA")
				assert.Contains(t, l.String(), "Re-issued the webhook serving certificate from the same CA")
			}
			assert.Contains(t, l.String(), tc.logged)
			names := opts.DNSNames()
			for _, ip := range opts.ExtraIPs {
				names = append(names, ip.String())
			}
			requireValidFor(t, caPEM, after.Data[TLSCertKey], clk.Now(), names...)
			requireCertDirHolds(t, dir, after)

			_, err = m.Ensure(t.Context())
			require.NoError(t, err)
			assert.Equal(t, after.ResourceVersion, getSecret(t, c).ResourceVersion, "a renewed Secret must be stable")
		})
	}
}

func TestManager_Ensure_keepsACertificateOutsideTheRotationWindow(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	c := fake.NewClientBuilder().Build()
	o := testOptions(clk, t.TempDir())
	o.Validity, o.RotateBefore = 48*time.Hour, 24*time.Hour
	m := &Manager{Client: c, Options: o}
	_, err := m.Ensure(t.Context())
	require.NoError(t, err)
	before := getSecret(t, c)

	clk.Step(24*time.Hour - time.Minute)
	_, err = m.Ensure(t.Context())
	require.NoError(t, err)
	assert.Equal(t, before.ResourceVersion, getSecret(t, c).ResourceVersion, "24h01m left: kept")

	clk.Step(2 * time.Minute)
	_, err = m.Ensure(t.Context())
	require.NoError(t, err)
	after := getSecret(t, c)
	assert.NotEqual(t, before.Data[TLSCertKey], after.Data[TLSCertKey], "23h59m left: rotated")
	assert.Equal(t, clk.Now().Add(48*time.Hour).Unix(), parseCert(t, after.Data[TLSCertKey]).NotAfter.Unix())
}

func TestManager_Ensure_toleratesClockSkewBetweenReplicas(t *testing.T) {
	cases := map[string]struct {
		ahead time.Duration
		kept  bool
	}{
		"a Secret from a replica 3 minutes ahead is used as it is":           {ahead: 3 * time.Minute, kept: true},
		"a Secret from a replica 10 minutes ahead is taken as not yet valid": {ahead: 10 * time.Minute, kept: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			now := time.Now()
			c := fake.NewClientBuilder().Build()
			_, err := (&Manager{Client: c, Options: testOptions(clocktesting.NewFakeClock(now.Add(tc.ahead)), t.TempDir())}).Ensure(t.Context())
			require.NoError(t, err)
			before := getSecret(t, c)

			_, err = (&Manager{Client: c, Options: testOptions(clocktesting.NewFakeClock(now), t.TempDir())}).Ensure(t.Context())
			require.NoError(t, err)
			after := getSecret(t, c)
			assert.Equal(t, tc.kept, before.ResourceVersion == after.ResourceVersion)
		})
	}
}

func TestManager_Ensure_refusesBadOptions(t *testing.T) {
	cases := map[string]struct {
		change func(o *Options)
		want   string
	}{
		"a rotation window as long as the validity": {
			change: func(o *Options) { o.Validity, o.RotateBefore = time.Hour, time.Hour },
			want:   "rotate-before 1h0m0s must be positive and shorter than the validity 1h0m0s",
		},
		"a CA that would not outlive one serving certificate": {
			change: func(o *Options) { o.Validity, o.CAValidity = 48*time.Hour, 24*time.Hour },
			want:   "CA validity 24h0m0s must be longer than the validity 48h0m0s",
		},
		"an empty extra DNS name": {
			change: func(o *Options) { o.ExtraDNSNames = []string{"a.example", ""} },
			want:   "extra DNS name 1 is empty",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientBuilder().Build()
			o := testOptions(clocktesting.NewFakeClock(time.Now()), t.TempDir())
			tc.change(&o)
			_, err := (&Manager{Client: c, Options: o}).Ensure(t.Context())
			require.ErrorContains(t, err, tc.want)
			var s corev1.Secret
			assert.True(t, apierrors.IsNotFound(c.Get(t.Context(), secretKey, &s)), "nothing may be created")
		})
	}
}

func TestManager_Ensure_returnsAPIErrors(t *testing.T) {
	c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return apierrors.NewForbidden(corev1.Resource("secrets"), testSecret, nil)
		},
	}).Build()
	_, err := (&Manager{Client: c, Options: testOptions(clocktesting.NewFakeClock(time.Now()), t.TempDir())}).Ensure(t.Context())
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err), "the API error must be wrapped, not swallowed: %v", err)
	assert.Contains(t, err.Error(), "reading Secret guard-ns/guard-certs")
}

func TestManager_Start_copiesSecretChangesIntoCertDir(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	c := fake.NewClientBuilder().Build()
	dir := t.TempDir()
	o := testOptions(clk, dir)
	o.CheckInterval = 5 * time.Minute
	m := &Manager{Client: c, Options: o}
	assert.False(t, m.NeedLeaderElection(), "every replica keeps its own CertDir")

	ctx, cancel := context.WithCancel(logr.NewContext(t.Context(), logr.Discard()))
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()

	// The first check runs at once; then Start waits on the clock.
	require.Eventually(t, clk.HasWaiters, 5*time.Second, time.Millisecond)
	first := getSecret(t, c)
	requireCertDirHolds(t, dir, first)

	// Another replica (here: the test) re-issues the pair from the same CA.
	ca, err := LoadCA(first.Data[CACertKey], first.Data[CAKeyKey])
	require.NoError(t, err)
	pair, err := ca.issue(o.DNSNames(), o.ExtraIPs, clk.Now(), DefaultValidity)
	require.NoError(t, err)
	changed := first.DeepCopy()
	changed.Data[TLSCertKey], changed.Data[TLSKeyKey] = pair.CertPEM, pair.KeyPEM
	require.NoError(t, c.Update(t.Context(), changed))

	clk.Step(o.CheckInterval - time.Second)
	cert, err := os.ReadFile(filepath.Join(dir, CertFile))
	require.NoError(t, err)
	assert.Equal(t, first.Data[TLSCertKey], cert, "not yet checked")

	clk.Step(time.Second)
	require.Eventually(t, func() bool {
		cert, err := os.ReadFile(filepath.Join(dir, CertFile))
		// Waiting again means the check is over, old pair removed.
		return err == nil && string(cert) == string(pair.CertPEM) && clk.HasWaiters()
	}, 5*time.Second, time.Millisecond, "the next check copies the Secret's new pair")
	requireCertDirHolds(t, dir, getSecret(t, c))
	assert.Equal(t, changed.Data[TLSCertKey], getSecret(t, c).Data[TLSCertKey], "a valid pair is used as it is")

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Start did not return after its context was cancelled")
	}
}

func TestWriteCertDir_swapsThePairAtomically(t *testing.T) {
	dir := t.TempDir()
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		return string(b)
	}
	written, err := writeCertDir(dir, []byte("cert 1"), []byte("key 1"))
	require.NoError(t, err)
	assert.True(t, written)
	assert.Equal(t, "cert 1", read(CertFile))
	assert.Equal(t, "key 1", read(KeyFile))
	first, err := os.Readlink(filepath.Join(dir, dataLink))
	require.NoError(t, err)
	requireNoLeftovers(t, dir)

	written, err = writeCertDir(dir, []byte("cert 1"), []byte("key 1"))
	require.NoError(t, err)
	assert.False(t, written, "same content: nothing written")
	again, err := os.Readlink(filepath.Join(dir, dataLink))
	require.NoError(t, err)
	assert.Equal(t, first, again)

	certBefore, err := os.Stat(filepath.Join(dir, CertFile))
	require.NoError(t, err)
	written, err = writeCertDir(dir, []byte("cert 2"), []byte("key 2"))
	require.NoError(t, err)
	assert.True(t, written)
	assert.Equal(t, "cert 2", read(CertFile))
	assert.Equal(t, "key 2", read(KeyFile))
	certAfter, err := os.Stat(filepath.Join(dir, CertFile))
	require.NoError(t, err)
	assert.False(t, os.SameFile(certBefore, certAfter), "a new pair is new files, never a file rewritten in place")
	_, err = os.Stat(filepath.Join(dir, first))
	assert.ErrorIs(t, err, os.ErrNotExist, "the old pair is removed")
	requireNoLeftovers(t, dir)

	for name, perm := range map[string]os.FileMode{CertFile: 0o644, KeyFile: 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, perm, fi.Mode().Perm(), name)
	}
}

func TestWriteCertDir_takesOverPlainFiles(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, CertFile), []byte("old cert"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, KeyFile), []byte("old key"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, dataDirPrefix+"left-by-a-crash"), 0o755))

	written, err := writeCertDir(dir, []byte("cert"), []byte("key"))
	require.NoError(t, err)
	assert.True(t, written)
	requireNoLeftovers(t, dir)
	b, err := os.ReadFile(filepath.Join(dir, KeyFile))
	require.NoError(t, err)
	assert.Equal(t, "key", string(b))
}
