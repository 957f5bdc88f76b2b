package run

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/webhook-guard/webhook-guard/certs"
)

// certSetupTimeout bounds the first Ensure, before the manager starts: the
// service fails to start rather than wait forever on the apiserver.
const certSetupTimeout = time.Minute

// CertOptions are the flags of the self-managed certificate. Defaults are
// applied in AddFlags, the only place they are set.
type CertOptions struct {
	// SecretName is the Secret holding the CA and serving pair
	// (--cert-secret). Default webhook-guard-certs; empty turns
	// self-management off, and --webhook-cert-dir must then be filled by
	// something else (cert-manager, a mounted Secret). It is used only when
	// --webhook-cert-dir is set: without a webhook server no Secret is
	// read or written, whatever it says.
	SecretName string
	// Namespace holds the Secret and the Service (--cert-namespace).
	// Default webhook-guard-system.
	Namespace string
	// ServiceName is the Service in front of the webhook
	// (--cert-service-name): the certificate is valid for
	// <service>.<namespace>.svc and <service>.<namespace>.svc.cluster.local.
	// Default webhook-guard.
	ServiceName string
	// ExtraSANs are further DNS names and IP addresses for the certificate
	// (--cert-extra-sans, comma-separated), such as the host in the static
	// webhook manifest's URL. Default none.
	ExtraSANs SANList
	// Validity is the lifetime of a serving certificate (--cert-validity).
	// Default 2160h (90 days).
	Validity time.Duration
	// RotateBefore is how long before expiry the certificate is re-issued
	// (--cert-rotate-before). Default 0: a third of Validity.
	RotateBefore time.Duration
	// CheckInterval is how often every replica re-reads the Secret and
	// refreshes --webhook-cert-dir from it (--cert-check-interval).
	// Default 1m.
	CheckInterval time.Duration
}

// AddFlags adds the flags of the self-managed certificate to fs.
func (o *CertOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.SecretName, "cert-secret", certs.DefaultSecretName, "Secret in which the service keeps its own CA and webhook serving certificate, when --webhook-cert-dir is set (without it there is no webhook server and no Secret is touched); empty turns this off (then --webhook-cert-dir must be filled by something else).")
	fs.StringVar(&o.Namespace, "cert-namespace", certs.DefaultNamespace, "Namespace of --cert-secret and of the webhook's Service.")
	fs.StringVar(&o.ServiceName, "cert-service-name", certs.DefaultServiceName, "Service in front of the webhook; the certificate is valid for <service>.<namespace>.svc[.cluster.local].")
	fs.Var(&o.ExtraSANs, "cert-extra-sans", "Comma-separated further DNS names and IP addresses for the webhook certificate (for example the host of the static manifest's URL).")
	fs.DurationVar(&o.Validity, "cert-validity", certs.DefaultValidity, "Lifetime of the webhook serving certificate.")
	fs.DurationVar(&o.RotateBefore, "cert-rotate-before", 0, "Re-issue the webhook serving certificate this long before it expires; 0 means a third of --cert-validity.")
	fs.DurationVar(&o.CheckInterval, "cert-check-interval", certs.DefaultCheckInterval, "How often each replica re-reads --cert-secret for expiry and changes.")
}

// certManager turns the flags into a certs.Manager writing to certDir.
func (o CertOptions) certManager(c client.Client, certDir string) *certs.Manager {
	return &certs.Manager{Client: c, Options: certs.Options{
		Namespace: o.Namespace, SecretName: o.SecretName, ServiceName: o.ServiceName,
		ExtraDNSNames: o.ExtraSANs.DNSNames, ExtraIPs: o.ExtraSANs.IPs,
		CertDir:  certDir,
		Validity: o.Validity, RotateBefore: o.RotateBefore, CheckInterval: o.CheckInterval,
	}}
}

// setupCerts makes sure the certificate Secret exists and certDir holds its
// pair before the manager starts, so that the webhook server starts with a
// certificate, and adds the certs.Manager to mgr to keep rotating it on
// every replica. It does nothing when self-management is off
// (--cert-secret empty) or the webhook server is off (certDir empty).
//
// c must be a direct client, not mgr.GetClient(): that one's cache would
// list and watch every Secret in the cluster, which RBAC does not allow.
func setupCerts(ctx context.Context, mgr manager.Manager, c client.Client, certDir string, o CertOptions) error {
	log := logf.FromContext(ctx).WithName("certs")
	switch {
	case certDir == "":
		log.Info("No webhook server (no --webhook-cert-dir): no serving certificate to manage")
		return nil
	case o.SecretName == "":
		log.Info("Not managing the webhook serving certificate (--cert-secret is empty)", "webhookCertDir", certDir)
		return nil
	}
	m := o.certManager(c, certDir)
	ctx, cancel := context.WithTimeout(logf.IntoContext(ctx, log), certSetupTimeout)
	defer cancel()
	if _, err := m.Ensure(ctx); err != nil {
		return fmt.Errorf("preparing the webhook serving certificate (--cert-secret %s/%s): %w", o.Namespace, o.SecretName, err)
	}
	if err := mgr.Add(m); err != nil {
		return fmt.Errorf("adding the certificate rotation: %w", err)
	}
	return nil
}

// checkMetricsCert makes sure that certDir, when set, holds a pair the
// metrics server can serve: controller-runtime would otherwise fall back,
// silently, to a self-signed certificate that no scraper's CA verifies.
// It runs after setupCerts, which writes the pair when certDir is the
// webhook's cert dir.
func checkMetricsCert(certDir string) error {
	if certDir == "" {
		return nil
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(certDir, certs.TLSCertKey), filepath.Join(certDir, certs.TLSKeyKey)); err != nil {
		return fmt.Errorf("--metrics-cert-dir %s: no certificate to serve metrics with: %w", certDir, err)
	}
	return nil
}

// SANList is a flag value of comma-separated DNS names and IP addresses.
type SANList struct {
	// DNSNames are the names, IPs the addresses, in the order given.
	DNSNames []string
	IPs      []net.IP
}

var _ pflag.Value = &SANList{}

// Type names the value in help.
func (s *SANList) Type() string { return "names" }

// String returns the list as it is given on the command line.
func (s *SANList) String() string {
	if s == nil {
		return ""
	}
	parts := append([]string(nil), s.DNSNames...)
	for _, ip := range s.IPs {
		parts = append(parts, ip.String())
	}
	return strings.Join(parts, ",")
}

// Set parses a comma-separated list; IP addresses go to IPs, the rest must
// be DNS names. Repeating the flag adds to the list.
func (s *SANList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return errors.New("empty name in the list")
		}
		if ip := net.ParseIP(part); ip != nil {
			s.IPs = append(s.IPs, ip)
			continue
		}
		if errs := validation.IsDNS1123Subdomain(part); len(errs) > 0 {
			return fmt.Errorf("%q is neither an IP address nor a DNS name: %s", part, strings.Join(errs, "; "))
		}
		s.DNSNames = append(s.DNSNames, part)
	}
	return nil
}
