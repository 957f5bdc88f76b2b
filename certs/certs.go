package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// CA is a self-signed certificate authority held in memory.
type CA struct {
	// CertPEM is the CA certificate, PEM encoded; it is what a caBundle holds.
	CertPEM []byte
	// KeyPEM is the CA's private key, PEM encoded. Whoever holds it can
	// issue certificates that every holder of CertPEM trusts: it is stored
	// only in the Secret the Manager owns.
	KeyPEM []byte
	cert   *x509.Certificate
	key    crypto.Signer
}

// Pair is a certificate and its private key, both PEM encoded.
type Pair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// TLSCertificate parses the pair for use in a tls.Config.
func (p Pair) TLSCertificate() (tls.Certificate, error) {
	return tls.X509KeyPair(p.CertPEM, p.KeyPEM)
}

// NewCA generates a CA whose certificate is valid from now for validity.
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	return newCA(commonName, time.Now(), validity)
}

// LoadCA parses a CA certificate and its private key, both PEM encoded, as
// NewCA returns them in CertPEM and KeyPEM. It fails when the certificate
// is not a CA or the key does not belong to it.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("parsing CA certificate and key: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("certificate %q is not a CA", cert.Subject.CommonName)
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("CA key of type %T cannot sign", pair.PrivateKey)
	}
	return &CA{CertPEM: certPEM, KeyPEM: keyPEM, cert: cert, key: key}, nil
}

// NotAfter is when the CA certificate expires.
func (ca *CA) NotAfter() time.Time { return ca.cert.NotAfter }

func newCA(commonName string, now time.Time, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	tmpl, err := template(commonName, now, validity)
	if err != nil {
		return nil, err
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("signing CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding CA key: %w", err)
	}
	return &CA{CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("EC PRIVATE KEY", keyDER), cert: cert, key: key}, nil
}

// Issue signs a serving certificate for the given DNS names and IP
// addresses, valid from now for validity.
func (ca *CA) Issue(dnsNames []string, ips []net.IP, validity time.Duration) (Pair, error) {
	return ca.issue(dnsNames, ips, time.Now(), validity)
}

func (ca *CA) issue(dnsNames []string, ips []net.IP, now time.Time, validity time.Duration) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("generating serving key: %w", err)
	}
	cn := "webhook-guard"
	if len(dnsNames) > 0 {
		cn = dnsNames[0]
	}
	tmpl, err := template(cn, now, validity)
	if err != nil {
		return Pair{}, err
	}
	tmpl.DNSNames = dnsNames
	tmpl.IPAddresses = ips
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Pair{}, fmt.Errorf("signing serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Pair{}, fmt.Errorf("encoding serving key: %w", err)
	}
	return Pair{CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("EC PRIVATE KEY", keyDER)}, nil
}

// template starts a certificate valid from a minute before now, to allow
// for clock skew between replicas and the apiserver, for validity.
func template(commonName string, now time.Time, validity time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, fmt.Errorf("generating serial number: %w", err)
	}
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName, Organization: []string{"webhook-guard"}},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(validity),
	}, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
