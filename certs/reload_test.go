package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/big"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// runtimeLogs collects what controller-runtime logs, certwatcher included.
var runtimeLogs logs

func TestMain(m *testing.M) {
	logf.SetLogger(funcr.New(func(prefix, args string) {
		runtimeLogs.mu.Lock()
		defer runtimeLogs.mu.Unlock()
		runtimeLogs.lines = append(runtimeLogs.lines, prefix+" "+args)
	}, funcr.Options{}))
	os.Exit(m.Run())
}

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
// rotates the certificate twice under it. Each rotation must be served on
// new connections well before certwatcher's 10-second poll could have
// found it: the rename itself triggers the reload. The second rotation
// proves that the watch survives the first rename. certwatcher must never
// see a certificate with another's key on the way.
func TestManager_Ensure_rotationIsServedWithoutRestart(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	c := fake.NewClientBuilder().Build()
	dir := t.TempDir()
	m := &Manager{Client: c, Options: testOptions(clk, dir)}
	caPEM, err := m.Ensure(t.Context())
	require.NoError(t, err)

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
		case <-time.After(10 * time.Second):
			t.Error("the webhook server did not stop")
		}
	})
	require.Eventually(t, func() bool { return srv.StartedChecker()(nil) == nil }, 10*time.Second, 10*time.Millisecond)

	want := parseCert(t, getSecret(t, c).Data[TLSCertKey]).SerialNumber
	got, err := servedSerial(addr, caPEM, clk)
	require.NoError(t, err)
	require.Equal(t, want, got, "the server serves the Secret's certificate")

	for i := range 2 {
		clk.Step(DefaultValidity - DefaultValidity/3 + time.Hour)
		gotCA, err := m.Ensure(t.Context())
		require.NoError(t, err)
		rotated := time.Now()
		require.Equal(t, caPEM, gotCA, "rotation keeps the CA, so the caBundle stays valid")
		next := parseCert(t, getSecret(t, c).Data[TLSCertKey]).SerialNumber
		require.NotEqual(t, want, next, "rotation %d issues a new certificate", i+1)
		want = next

		// 5s: well under certwatcher's 10s poll, so only the file event
		// can have triggered the reload.
		require.Eventually(t, func() bool {
			got, err := servedSerial(addr, caPEM, clk)
			return err == nil && got.Cmp(want) == 0
		}, 5*time.Second, 5*time.Millisecond, "rotation %d must be served without a restart", i+1)
		t.Logf("rotation %d served %s after the files were replaced", i+1, time.Since(rotated).Round(time.Millisecond))
	}
	var watcher []string // What certwatcher logged about this CertDir.
	for _, l := range strings.Split(runtimeLogs.String(), "\n") {
		if strings.Contains(l, "certwatcher") && strings.Contains(l, dir) {
			watcher = append(watcher, l)
		}
	}
	assert.Contains(t, strings.Join(watcher, "\n"), "Updated current TLS certificate")
	assert.NotContains(t, strings.Join(watcher, "\n"), "error", "certwatcher must only ever read whole pairs")
}
