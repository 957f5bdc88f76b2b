package certs

import (
	"crypto/x509"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCA_Issue_verifiesAgainstCA(t *testing.T) {
	ca, err := NewCA("test-ca", time.Hour)
	require.NoError(t, err)
	pair, err := ca.Issue([]string{"svc.ns.svc"}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
	require.NoError(t, err)

	tc, err := pair.TLSCertificate()
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(tc.Certificate[0])
	require.NoError(t, err)

	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(ca.CertPEM))
	for _, name := range []string{"svc.ns.svc", "127.0.0.1"} {
		_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name})
		assert.NoError(t, err, name)
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "other.ns.svc"})
	assert.Error(t, err, "a name outside the SANs must not verify")

	other, err := NewCA("other-ca", time.Hour)
	require.NoError(t, err)
	otherRoots := x509.NewCertPool()
	otherRoots.AppendCertsFromPEM(other.CertPEM)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: otherRoots, DNSName: "svc.ns.svc"})
	assert.Error(t, err, "a certificate must not verify against another CA")
}
