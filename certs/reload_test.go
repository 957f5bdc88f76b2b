package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/big"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	cwmetrics "sigs.k8s.io/controller-runtime/pkg/certwatcher/metrics"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// servedSerial opens a new TLS connection to addr, verifies the served
// certificate against caPEM for the Service name at the fake clock's time,
// and returns its serial number.
func servedSerial(addr string, caPEM []byte, clk *clocktesting.FakeClock) (*big.Int, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no CA certificate")
	}
	d := &net.Dialer{Timeout: time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{
		RootCAs: roots, ServerName: wantedNames[0], Time: clk.Now, MinVersion: tls.VersionTLS12,
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// TestManager_Ensure_rotationIsServedWithoutRestart runs controller-runtime's
// webhook server, as cmd/guard does, on a CertDir kept by a Manager, and
// rotates the certificate twice under it.
//
// Beside the server, a certwatcher of our own watches the same files with
// a one-hour poll, so each reload it reports can only come from the file
// event of the rename: that is what proves the ..data swap is seen at once,
// without timing the machine. The second rotation proves that the watch
// survives the first rename. certwatcher's own error counter proves it
// never read a certificate with another's key on the way.
func TestManager_Ensure_rotationIsServedWithoutRestart(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	c := fake.NewClientBuilder().Build()
	dir := t.TempDir()
	m := &Manager{Client: c, Options: testOptions(clk, dir)}
	caPEM, err := m.Ensure(t.Context())
	require.NoError(t, err)
	readErrors := testutil.ToFloat64(cwmetrics.ReadCertificateErrors)

	reloads := make(chan *big.Int, 10)
	watcher, err := certwatcher.New(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	require.NoError(t, err)
	watcher = watcher.WithWatchInterval(time.Hour)
	watcher.RegisterCallback(func(cert tls.Certificate) {
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err == nil {
			reloads <- leaf.SerialNumber
		}
	})
	go func() { _ = watcher.Start(t.Context()) }()

	port := freePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	srv := webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir})
	done := make(chan error, 1)
	go func() { done <- srv.Start(t.Context()) }()
	t.Cleanup(func() {
		// t.Context is cancelled before Cleanup runs; the server shuts down.
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(time.Minute):
			t.Error("the webhook server did not stop")
		}
	})
	require.Eventually(t, func() bool { return srv.StartedChecker()(nil) == nil }, time.Minute, 10*time.Millisecond)
	require.Eventually(t, func() bool { cert, _ := watcher.GetCertificate(nil); return cert != nil }, time.Minute, 10*time.Millisecond)

	want := parseCert(t, getSecret(t, c).Data[TLSCertKey]).SerialNumber
	require.Equal(t, want, <-reloads, "RegisterCallback reports the certificate read at start")
	got, err := servedSerial(addr, caPEM, clk)
	require.NoError(t, err)
	require.Equal(t, want, got, "the server serves the Secret's certificate")

	for i := range 2 {
		clk.Step(DefaultValidity - DefaultValidity/3 + time.Hour)
		gotCA, err := m.Ensure(t.Context())
		require.NoError(t, err)
		require.Equal(t, caPEM, gotCA, "rotation keeps the CA, so the caBundle stays valid")
		next := parseCert(t, getSecret(t, c).Data[TLSCertKey]).SerialNumber
		require.NotEqual(t, want, next, "rotation %d issues a new certificate", i+1)
		want = next

		select {
		case got := <-reloads:
			require.Equal(t, want, got, "rotation %d: the file event reloaded another certificate", i+1)
		case <-time.After(time.Minute): // a hang guard, not a timing assertion
			t.Fatalf("rotation %d: no file event reloaded the certificate", i+1)
		}
		require.Eventually(t, func() bool {
			got, err := servedSerial(addr, caPEM, clk)
			return err == nil && got.Cmp(want) == 0
		}, time.Minute, 5*time.Millisecond, "rotation %d must be served without a restart", i+1)
	}
	assert.Equal(t, readErrors, testutil.ToFloat64(cwmetrics.ReadCertificateErrors), "certwatcher must only ever read whole pairs")
}
