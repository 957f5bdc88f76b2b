package certs

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"k8s.io/utils/clock"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// Defaults of Options. They are applied in one place, Options.complete.
const (
	// DefaultNamespace is the namespace of the Secret and the Service.
	DefaultNamespace = circuit.DefaultNamespace
	// DefaultSecretName is the Secret that holds the CA and serving pair.
	DefaultSecretName = "webhook-guard-certs"
	// DefaultServiceName is the Service in front of the webhook server.
	DefaultServiceName = "webhook-guard"
	// DefaultValidity is the lifetime of a serving certificate: 90 days.
	DefaultValidity = 90 * 24 * time.Hour
	// DefaultCAValidity is the lifetime of a CA: 10 years.
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	// DefaultCheckInterval is how often Start re-reads the Secret.
	DefaultCheckInterval = time.Minute
	// retryInterval bounds the wait after a failed check, so that an
	// apiserver hiccup does not leave a replica a whole CheckInterval behind.
	retryInterval = 10 * time.Second
)

// Keys of the Secret. TLSCertKey and TLSKeyKey are those of a Secret of
// type kubernetes.io/tls; CACertKey is what cert-manager writes too.
const (
	// TLSCertKey holds the serving certificate, PEM encoded.
	TLSCertKey = "tls.crt"
	// TLSKeyKey holds the serving certificate's private key, PEM encoded.
	TLSKeyKey = "tls.key"
	// CACertKey holds the CA certificate: what a caBundle must contain.
	CACertKey = "ca.crt"
	// CAKeyKey holds the CA's private key, so that every replica can
	// re-issue the serving certificate from the same CA.
	CAKeyKey = "ca.key"
)

// Options configure a Manager. The zero value is usable: every field has a
// default, applied by complete.
type Options struct {
	// Namespace holds the Secret; it is also the namespace part of the
	// serving certificate's names. Default DefaultNamespace.
	Namespace string
	// SecretName is the Secret holding the CA and the serving pair.
	// Default DefaultSecretName.
	SecretName string
	// ServiceName is the Service in front of the webhook server. The
	// serving certificate is valid for <ServiceName>.<Namespace>.svc and
	// <ServiceName>.<Namespace>.svc.cluster.local. Default DefaultServiceName.
	ServiceName string
	// ExtraDNSNames are further DNS names the serving certificate must
	// carry, for example the host name a static webhook manifest calls.
	// Default none.
	ExtraDNSNames []string
	// ExtraIPs are IP addresses the serving certificate must carry, for
	// example 127.0.0.1 for a static webhook on the control-plane node.
	// Default none.
	ExtraIPs []net.IP
	// CertDir is the folder the webhook server reads tls.crt and tls.key
	// from; the Manager writes them there whenever they differ from the
	// Secret. Default empty: only the Secret is kept.
	CertDir string
	// Validity is the lifetime of a serving certificate. Default
	// DefaultValidity (90 days).
	Validity time.Duration
	// CAValidity is the lifetime of a CA. It must be longer than Validity:
	// the CA is replaced once it has less than Validity left, because a
	// serving certificate issued then would outlive it. Default
	// DefaultCAValidity (10 years).
	CAValidity time.Duration
	// RotateBefore is how long before its expiry a serving certificate is
	// re-issued. It must be shorter than Validity. Default Validity/3.
	RotateBefore time.Duration
	// CheckInterval is how often Start re-reads the Secret: it bounds how
	// long a replica serves a certificate that another replica, or a person,
	// has replaced in the Secret. Each check is one GET of one Secret.
	// Default DefaultCheckInterval (1 minute).
	CheckInterval time.Duration
	// Clock tells the time for validity checks and new certificates.
	// Default the real clock.
	Clock clock.Clock
}

// complete returns the options with defaults applied, or an error naming
// the option that is out of range.
func (o Options) complete() (Options, error) {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.SecretName == "" {
		o.SecretName = DefaultSecretName
	}
	if o.ServiceName == "" {
		o.ServiceName = DefaultServiceName
	}
	if o.Validity == 0 {
		o.Validity = DefaultValidity
	}
	if o.CAValidity == 0 {
		o.CAValidity = DefaultCAValidity
	}
	if o.RotateBefore == 0 {
		o.RotateBefore = o.Validity / 3
	}
	if o.CheckInterval == 0 {
		o.CheckInterval = DefaultCheckInterval
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	var errs []error
	if o.Validity < 0 {
		errs = append(errs, fmt.Errorf("validity %s must be positive", o.Validity))
	}
	if o.RotateBefore < 0 || o.RotateBefore >= o.Validity {
		errs = append(errs, fmt.Errorf("rotate-before %s must be positive and shorter than the validity %s", o.RotateBefore, o.Validity))
	}
	if o.CAValidity <= o.Validity {
		errs = append(errs, fmt.Errorf("CA validity %s must be longer than the validity %s", o.CAValidity, o.Validity))
	}
	if o.CheckInterval < 0 {
		errs = append(errs, fmt.Errorf("check interval %s must be positive", o.CheckInterval))
	}
	for i, n := range o.ExtraDNSNames {
		if n == "" {
			errs = append(errs, fmt.Errorf("extra DNS name %d is empty", i))
		}
	}
	for i, ip := range o.ExtraIPs {
		if ip == nil {
			errs = append(errs, fmt.Errorf("extra IP %d is empty", i))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return o, fmt.Errorf("certificate options: %w", err)
	}
	return o, nil
}

// DNSNames are the DNS names the serving certificate must carry: the
// Service's two in-cluster names, then ExtraDNSNames, without repeats.
func (o Options) DNSNames() []string {
	o, _ = o.complete()
	names := []string{
		o.ServiceName + "." + o.Namespace + ".svc",
		o.ServiceName + "." + o.Namespace + ".svc.cluster.local",
	}
	for _, n := range o.ExtraDNSNames {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}
