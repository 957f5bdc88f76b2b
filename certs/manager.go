package certs

import (
	"context"
	"crypto/x509"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// maxAttempts bounds how often Ensure re-reads the Secret after losing a
// race (AlreadyExists on create, Conflict on update) within one call.
const maxAttempts = 5

// maxClockSkew is how far in the future a certificate's start may lie and
// still be taken as valid: another replica's clock may run ahead of this
// one's. Without it, replicas with skewed clocks would replace each
// other's fresh CA, breaking every caBundle.
const maxClockSkew = 5 * time.Minute

var (
	_ manager.Runnable               = &Manager{}
	_ manager.LeaderElectionRunnable = &Manager{}
)

// Manager keeps the webhook server's serving certificate: a CA and a
// serving pair in one Secret, shared by every replica, and a copy of the
// pair in CertDir, where controller-runtime's certwatcher picks it up.
//
// It only gets, creates and updates the one Secret named in Options, so
// Client should be a direct client (not the manager's cache, which would
// list and watch every Secret in the cluster), and RBAC needs no more than
// get and update on that Secret by resourceNames plus create on Secrets in
// its namespace.
type Manager struct {
	// Client reads and writes the Secret. Required.
	Client client.Client
	// Options say which Secret, which names and which lifetimes.
	Options Options

	mu sync.Mutex
}

// Ensure makes sure the Secret holds a CA and a serving pair that is valid
// for every wanted name and outside the rotation window, then that CertDir
// holds the same pair. It returns the CA certificate, PEM encoded: the
// caBundle a client of the webhook needs.
//
// A usable Secret is used as it is, so restarts and replicas share one CA.
// A missing Secret is created; when another replica creates it first,
// theirs is used. A Secret that is unusable, names too few hosts or is
// near expiry is updated with a resourceVersion precondition; on a
// conflict the Secret is read again and judged afresh. The serving pair is
// re-issued from the Secret's CA unless the CA itself is unusable or
// expires within Validity: only then is a new CA made, and every caBundle
// that holds the old one must be updated.
func (m *Manager) Ensure(ctx context.Context) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, err := m.Options.complete()
	if err != nil {
		return nil, err
	}
	key := types.NamespacedName{Namespace: o.Namespace, Name: o.SecretName}
	log := logf.FromContext(ctx).WithValues("secret", key)
	ctx = logf.IntoContext(ctx, log)

	mat, err := m.ensureSecret(ctx, o, key)
	if err != nil {
		return nil, err
	}
	if o.CertDir != "" {
		written, err := writeCertDir(o.CertDir, mat.cert, mat.key)
		if err != nil {
			return nil, fmt.Errorf("writing the serving certificate to %s: %w", o.CertDir, err)
		}
		if written {
			log.Info("Wrote the serving certificate for the webhook server", "certDir", o.CertDir, "notAfter", mat.notAfter)
		}
	}
	return mat.caCert, nil
}

// Start implements manager.Runnable: it calls Ensure at once and then
// every CheckInterval (sooner after a failure) until ctx is done. A failed
// check is logged and retried, never fatal: the pair already in CertDir
// keeps being served meanwhile.
func (m *Manager) Start(ctx context.Context) error {
	o, err := m.Options.complete()
	if err != nil {
		return err
	}
	log := logf.FromContext(ctx).WithName("certs")
	ctx = logf.IntoContext(ctx, log)
	for {
		wait := o.CheckInterval
		if _, err := m.Ensure(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Error(err, "Checking the webhook certificate failed; retrying", "retryIn", min(wait, retryInterval))
			wait = min(wait, retryInterval)
		}
		t := o.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: it is
// false, because every replica serves the webhook and must keep its own
// CertDir fresh.
func (m *Manager) NeedLeaderElection() bool { return false }

// material is the content of the Secret in a usable state.
type material struct {
	caCert, caKey, cert, key []byte
	notAfter                 time.Time
}

func (mt material) data() map[string][]byte {
	return map[string][]byte{CACertKey: mt.caCert, CAKeyKey: mt.caKey, TLSCertKey: mt.cert, TLSKeyKey: mt.key}
}

func (m *Manager) ensureSecret(ctx context.Context, o Options, key types.NamespacedName) (material, error) {
	log := logf.FromContext(ctx)
	now := o.Clock.Now()
	for range maxAttempts {
		var s corev1.Secret
		err := m.Client.Get(ctx, key, &s)
		if apierrors.IsNotFound(err) {
			mat, err := issue(o, nil, now)
			if err != nil {
				return material{}, err
			}
			s = corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
				Type:       corev1.SecretTypeTLS,
				Data:       mat.data(),
			}
			err = m.Client.Create(ctx, &s)
			if apierrors.IsAlreadyExists(err) {
				log.V(1).Info("Another replica created the certificate Secret first; using theirs")
				continue
			}
			if err != nil {
				return material{}, fmt.Errorf("creating Secret %s: %w", key, err)
			}
			log.Info("Created the webhook certificate Secret with a new CA; every caBundle for this webhook must hold it", "dnsNames", o.DNSNames(), "notAfter", mat.notAfter)
			return mat, nil
		}
		if err != nil {
			return material{}, fmt.Errorf("reading Secret %s: %w", key, err)
		}

		j := judge(s.Data, o, now)
		if j.reason == "" {
			return j.current, nil
		}
		mat, err := issue(o, j.ca, now)
		if err != nil {
			return material{}, err
		}
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		for k, v := range mat.data() {
			s.Data[k] = v
		}
		// The Secret's resourceVersion from the Get is the precondition.
		err = m.Client.Update(ctx, &s)
		if apierrors.IsConflict(err) {
			log.V(1).Info("The certificate Secret changed while it was renewed; reading it again")
			continue
		}
		if err != nil {
			return material{}, fmt.Errorf("updating Secret %s: %w", key, err)
		}
		if j.ca == nil {
			log.Info("Replaced the webhook CA and serving certificate; every caBundle holding the old CA must be updated",
				"reason", j.reason, "caNotAfter", now.Add(o.CAValidity), "notAfter", mat.notAfter)
		} else {
			log.Info("Re-issued the webhook serving certificate from the same CA", "reason", j.reason, "notAfter", mat.notAfter)
		}
		return mat, nil
	}
	return material{}, fmt.Errorf("secret %s kept changing while it was renewed; gave up after %d attempts", key, maxAttempts)
}

// issue makes a serving pair for the wanted names, signed by ca, or by a
// new CA when ca is nil.
func issue(o Options, ca *CA, now time.Time) (material, error) {
	if ca == nil {
		var err error
		if ca, err = newCA(o.ServiceName+"."+o.Namespace+" webhook CA", now, o.CAValidity); err != nil {
			return material{}, err
		}
	}
	pair, err := ca.issue(o.DNSNames(), o.ExtraIPs, now, o.Validity)
	if err != nil {
		return material{}, err
	}
	return material{caCert: ca.CertPEM, caKey: ca.KeyPEM, cert: pair.CertPEM, key: pair.KeyPEM, notAfter: now.Add(o.Validity)}, nil
}

// judgement is what judge found in a Secret.
type judgement struct {
	// reason says why the serving pair must be re-issued; empty when the
	// Secret is usable as it is, and then current holds it.
	reason  string
	current material
	// ca is the Secret's CA when it can sign the new pair; nil when a new
	// CA is needed.
	ca *CA
}

// judge decides whether the Secret's content can be served as it is at
// now, and otherwise whether its CA can sign the replacement. It never
// fails: anything it cannot parse is a reason to replace it.
func judge(data map[string][]byte, o Options, now time.Time) judgement {
	ca, caReason := judgeCA(data, o, now)
	if caReason != "" {
		return judgement{reason: caReason}
	}
	j := judgement{ca: ca}
	pair := Pair{CertPEM: data[TLSCertKey], KeyPEM: data[TLSKeyKey]}
	if len(pair.CertPEM) == 0 || len(pair.KeyPEM) == 0 {
		j.reason = "the Secret holds no serving certificate and key"
		return j
	}
	tc, err := pair.TLSCertificate()
	if err != nil {
		j.reason = fmt.Sprintf("the serving certificate and key are unusable: %v", err)
		return j
	}
	leaf, err := x509.ParseCertificate(tc.Certificate[0])
	if err != nil {
		j.reason = fmt.Sprintf("the serving certificate is unusable: %v", err)
		return j
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	verifyAt := now
	if leaf.NotBefore.After(now) && leaf.NotBefore.Sub(now) <= maxClockSkew {
		verifyAt = leaf.NotBefore
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: verifyAt, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		j.reason = fmt.Sprintf("the serving certificate does not verify against the Secret's CA: %v", err)
		return j
	}
	for _, name := range o.DNSNames() {
		if err := leaf.VerifyHostname(name); err != nil {
			j.reason = fmt.Sprintf("the serving certificate is not valid for %q", name)
			return j
		}
	}
	for _, ip := range o.ExtraIPs {
		if err := leaf.VerifyHostname(ip.String()); err != nil {
			j.reason = fmt.Sprintf("the serving certificate is not valid for IP %s", ip)
			return j
		}
	}
	if left := leaf.NotAfter.Sub(now); left < o.RotateBefore {
		j.reason = fmt.Sprintf("the serving certificate expires at %s, less than %s from now", leaf.NotAfter.UTC().Format(time.RFC3339), o.RotateBefore)
		return j
	}
	j.current = material{caCert: ca.CertPEM, caKey: ca.KeyPEM, cert: pair.CertPEM, key: pair.KeyPEM, notAfter: leaf.NotAfter}
	return j
}

// judgeCA returns the Secret's CA, or why a new one is needed.
func judgeCA(data map[string][]byte, o Options, now time.Time) (*CA, string) {
	certPEM, keyPEM := data[CACertKey], data[CAKeyKey]
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return nil, fmt.Sprintf("the Secret holds no CA certificate and key (%s, %s)", CACertKey, CAKeyKey)
	}
	ca, err := LoadCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Sprintf("the Secret's CA is unusable: %v", err)
	}
	switch {
	case ca.cert.NotBefore.Sub(now) > maxClockSkew:
		return nil, fmt.Sprintf("the Secret's CA is not valid before %s", ca.cert.NotBefore.UTC().Format(time.RFC3339))
	case ca.cert.NotAfter.Sub(now) < o.Validity:
		return nil, fmt.Sprintf("the Secret's CA expires at %s, before a new serving certificate would", ca.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return ca, ""
}
