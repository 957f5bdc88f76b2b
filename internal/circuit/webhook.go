package circuit

import (
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
)

// The breaker's changes to a webhook, and how to take them back: one
// definition for the breaker, "guard release" and the tests.

// OpenWebhook applies mode to wh and reports whether anything changed.
func OpenWebhook(wh *admissionregistrationv1.MutatingWebhook, mode Mode) bool {
	changed := false
	if wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Ignore {
		wh.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		changed = true
	}
	if mode == ModeBypass && BypassIndex(wh) < 0 {
		wh.MatchConditions = append(slices.Clip(wh.MatchConditions), admissionregistrationv1.MatchCondition{Name: BypassCondition, Expression: BypassExpression})
		changed = true
	}
	return changed
}

// InPlace reports whether the changes entry records are still on wh. A
// handoff removes the bypass marker and keeps the entry, so a handed-off
// circuit is in place while failurePolicy is Ignore: it is held open in
// Ignore until it closes.
func InPlace(wh *admissionregistrationv1.MutatingWebhook, entry Entry) bool {
	if wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Ignore {
		return false
	}
	return entry.Mode != ModeBypass || entry.HandedOff() || BypassIndex(wh) >= 0
}

// Restored reports whether wh's failurePolicy is back at entry's
// original (RestoresOriginal).
func Restored(wh *admissionregistrationv1.MutatingWebhook, entry Entry) bool {
	return RestoresOriginal(PolicyString(wh.FailurePolicy), PolicyString(entry.OriginalFailurePolicy))
}

// RestoresOriginal reports whether failurePolicy policy puts back
// original, both as PolicyString renders them: the original itself, or
// Fail, kube-apiserver's default, where the original is unset. The guard's
// rule judges it so in Go and in CEL (admission's restoresCEL).
func RestoresOriginal(policy, original string) bool {
	return policy == original || original == Unset && policy == string(admissionregistrationv1.Fail)
}

// Restore puts back what entry says was there, and removes the bypass
// marker. The guard forbids anyone else to touch either while open.
func Restore(wh *admissionregistrationv1.MutatingWebhook, entry Entry) {
	wh.FailurePolicy = entry.OriginalFailurePolicy
	RemoveBypass(wh)
}

// RemoveBypass removes wh's bypass matchCondition, if it has one; no
// matchCondition left is none (nil), as the webhook's owner wrote it.
func RemoveBypass(wh *admissionregistrationv1.MutatingWebhook) {
	if i := BypassIndex(wh); i >= 0 {
		wh.MatchConditions = append(wh.MatchConditions[:i:i], wh.MatchConditions[i+1:]...)
		if len(wh.MatchConditions) == 0 {
			wh.MatchConditions = nil
		}
	}
}

// BypassIndex is the index of wh's bypass matchCondition, or -1.
func BypassIndex(wh *admissionregistrationv1.MutatingWebhook) int {
	for i, mc := range wh.MatchConditions {
		if mc.Name == BypassCondition {
			return i
		}
	}
	return -1
}

// FindWebhook returns the webhook of mwc named name, or nil.
func FindWebhook(mwc *admissionregistrationv1.MutatingWebhookConfiguration, name string) *admissionregistrationv1.MutatingWebhook {
	if i := WebhookIndex(mwc, name); i >= 0 {
		return &mwc.Webhooks[i]
	}
	return nil
}

// WebhookIndex is the index of the webhook of mwc named name, or -1.
func WebhookIndex(mwc *admissionregistrationv1.MutatingWebhookConfiguration, name string) int {
	for i := range mwc.Webhooks {
		if mwc.Webhooks[i].Name == name {
			return i
		}
	}
	return -1
}
