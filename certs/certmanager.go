package certs

import (
	"context"
	"fmt"
	"strings"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// InjectCAFromAnnotation names, on a webhook configuration, the
// cert-manager Certificate ("<namespace>/<name>") whose CA cert-manager's
// cainjector copies into every caBundle of that configuration.
const InjectCAFromAnnotation = certmanagerv1.WantInjectAnnotation

// DiagnoseInjectedCA explains a TLS failure of a webhook whose
// configuration has the annotations mwcAnnotations, by reading the
// cert-manager Certificate that InjectCAFromAnnotation names. It returns
// "" when the annotation is absent; otherwise one sentence for an Event,
// a log or a status, naming the Certificate:
//
//   - the annotation is malformed, or the Certificate does not exist or
//     cannot be read (cert-manager then injects nothing, or the guard
//     cannot tell);
//   - the Certificate expired at, or is not valid before, a time;
//   - it is not Ready, with the condition's reason and message;
//   - it is being re-issued, so the injected caBundle may lag;
//   - it is Ready and valid until a time, so the failure has another cause.
//
// It reads one object with c, which must know the cert-manager.io/v1
// types (certmanagerv1.AddToScheme), and judges validity at now.
func DiagnoseInjectedCA(ctx context.Context, c client.Reader, mwcAnnotations map[string]string, now time.Time) string {
	ref, ok := mwcAnnotations[InjectCAFromAnnotation]
	if !ok || ref == "" {
		return ""
	}
	ns, name, found := strings.Cut(ref, "/")
	if !found || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Sprintf("annotation %s is %q, not <namespace>/<certificate>; cert-manager injects no caBundle", InjectCAFromAnnotation, ref)
	}
	key := types.NamespacedName{Namespace: ns, Name: name}

	var cert certmanagerv1.Certificate
	if err := c.Get(ctx, key, &cert); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Sprintf("Certificate %s named by annotation %s does not exist; cert-manager injects no caBundle", key, InjectCAFromAnnotation)
		case meta.IsNoMatchError(err):
			return fmt.Sprintf("Certificate %s named by annotation %s cannot exist: cert-manager's Certificate API is not installed", key, InjectCAFromAnnotation)
		default:
			return fmt.Sprintf("Certificate %s named by annotation %s could not be read: %v", key, InjectCAFromAnnotation, err)
		}
	}

	st := cert.Status
	ready := condition(st.Conditions, certmanagerv1.CertificateConditionReady)
	switch {
	case st.NotAfter != nil && !now.Before(st.NotAfter.Time):
		return fmt.Sprintf("Certificate %s expired at %s%s", key, stamp(st.NotAfter.Time), notReadySuffix(ready))
	case st.NotBefore != nil && now.Before(st.NotBefore.Time):
		return fmt.Sprintf("Certificate %s is not valid before %s%s", key, stamp(st.NotBefore.Time), notReadySuffix(ready))
	case ready == nil:
		return fmt.Sprintf("Certificate %s is not Ready: it has no Ready condition yet; cert-manager has not issued it", key)
	case ready.Status != cmmeta.ConditionTrue:
		return fmt.Sprintf("Certificate %s is not Ready: %s%s", key, reasonMessage(ready), stale(cert.Generation, ready))
	}
	until := "with no recorded expiry"
	if st.NotAfter != nil {
		until = "valid until " + stamp(st.NotAfter.Time)
	}
	if issuing := condition(st.Conditions, certmanagerv1.CertificateConditionIssuing); issuing != nil && issuing.Status == cmmeta.ConditionTrue {
		return fmt.Sprintf("Certificate %s is Ready and %s but is being re-issued (%s); until cert-manager injects the new CA, the caBundle may not match the served certificate", key, until, reasonMessage(issuing))
	}
	return fmt.Sprintf("Certificate %s is Ready and %s; the TLS failure has another cause", key, until)
}

func condition(conds []certmanagerv1.CertificateCondition, t certmanagerv1.CertificateConditionType) *certmanagerv1.CertificateCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// reasonMessage renders a condition as "<reason>: <message>", leaving out
// what is empty.
func reasonMessage(c *certmanagerv1.CertificateCondition) string {
	switch {
	case c.Reason != "" && c.Message != "":
		return c.Reason + ": " + c.Message
	case c.Reason != "":
		return c.Reason
	case c.Message != "":
		return c.Message
	}
	return "Ready is " + string(c.Status) + " with no reason given"
}

// notReadySuffix adds the Ready condition to an expiry verdict when it
// says more (cert-manager usually tells why renewal failed).
func notReadySuffix(ready *certmanagerv1.CertificateCondition) string {
	if ready == nil || ready.Status == cmmeta.ConditionTrue {
		return ""
	}
	return " and is not Ready: " + reasonMessage(ready)
}

// stale notes a condition written for an older spec of the Certificate.
func stale(generation int64, c *certmanagerv1.CertificateCondition) string {
	if c.ObservedGeneration == 0 || c.ObservedGeneration >= generation {
		return ""
	}
	return fmt.Sprintf(" (condition from generation %d; the Certificate is at %d and not yet reconciled)", c.ObservedGeneration, generation)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
