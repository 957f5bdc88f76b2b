package harness

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// ConfigMapWebhook returns a mutating webhook that matches ConfigMap
// creates in namespace only, served at url.
func ConfigMapWebhook(name, namespace, url string, caBundle []byte, policy admissionregistrationv1.FailurePolicyType) admissionregistrationv1.MutatingWebhook {
	return admissionregistrationv1.MutatingWebhook{
		Name:                    name,
		AdmissionReviewVersions: []string{"v1"},
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		FailurePolicy:           ptr.To(policy),
		TimeoutSeconds:          ptr.To[int32](1),
		ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url), CABundle: caBundle},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
			"kubernetes.io/metadata.name": namespace,
		}},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"},
			},
		}},
	}
}

// FindWebhook returns the webhook called name in mwc, or nil.
func FindWebhook(mwc *admissionregistrationv1.MutatingWebhookConfiguration, name string) *admissionregistrationv1.MutatingWebhook {
	return circuit.FindWebhook(mwc, name)
}

// HasBypassMarker reports whether w carries the breaker's bypass marker:
// the matchCondition circuit.BypassCondition with expression "false".
func HasBypassMarker(w *admissionregistrationv1.MutatingWebhook) bool {
	for _, mc := range w.MatchConditions {
		if mc.Name == circuit.BypassCondition {
			return mc.Expression == "false"
		}
	}
	return false
}

// IsOpen reports whether the breaker's changes are in place on hook: a
// record entry for this incarnation (UID) in mode, Ignore, and in Bypass
// mode the marker.
func IsOpen(mwc *admissionregistrationv1.MutatingWebhookConfiguration, hook, mode string) bool {
	rec, err := circuit.Decode(mwc.Annotations)
	if err != nil {
		return false
	}
	entry, ok := rec[hook]
	w := FindWebhook(mwc, hook)
	if !ok || w == nil || w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Ignore {
		return false
	}
	return string(entry.Mode) == mode && entry.UID == mwc.UID && HasBypassMarker(w) == (mode == "Bypass")
}

// CheckInvariant checks the breaker's contract on a stored object for the
// webhook hook, whose value before the guard touched it was original: the
// record is readable; hook has an entry if and only if the breaker's
// changes (Ignore and the bypass marker) are in place; and without an
// entry, unless the configuration is handed over by the override
// annotation, the webhook is exactly the original. It is meant for
// Bypass-mode targets, where "in place" is visible on the webhook alone.
func CheckInvariant(mwc *admissionregistrationv1.MutatingWebhookConfiguration, hook string, original admissionregistrationv1.MutatingWebhook) error {
	rec, err := circuit.Decode(mwc.Annotations)
	if err != nil {
		return fmt.Errorf("unreadable record: %w", err)
	}
	w := FindWebhook(mwc, hook)
	if w == nil {
		return fmt.Errorf("webhook %s is missing from %s", hook, mwc.Name)
	}
	entry, has := rec[hook]
	if entry.HandedOff() {
		// A handoff keeps the entry, with its original, until a write puts
		// that back; it removed the marker, and the fields are the
		// administrators' or held open in Ignore.
		if HasBypassMarker(w) {
			return fmt.Errorf("a handed-off entry with a bypass marker (resourceVersion %s)", mwc.ResourceVersion)
		}
		return nil
	}
	inPlace := w.FailurePolicy != nil && *w.FailurePolicy == admissionregistrationv1.Ignore && HasBypassMarker(w)
	if has != inPlace {
		return fmt.Errorf("an entry must exist iff the changes are in place: entry %t, changes in place %t (resourceVersion %s)", has, inPlace, mwc.ResourceVersion)
	}
	if !has && mwc.Annotations[circuit.OverrideAnnotation] == "" && !equality.Semantic.DeepEqual(*w, original) {
		return fmt.Errorf("without an entry the webhook must be the original (resourceVersion %s): got %+v, want %+v", mwc.ResourceVersion, *w, original)
	}
	return nil
}
