package breaker

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// planCopy copies of cur what Plan changes: the annotations, and each
// webhook's struct, whose failurePolicy and matchConditions Plan replaces
// (it never writes through a pointer or into a slice it did not make).
// The rest is shared with cur until finish.
func planCopy(cur *admissionregistrationv1.MutatingWebhookConfiguration) *admissionregistrationv1.MutatingWebhookConfiguration {
	next := *cur
	next.Annotations = maps.Clone(cur.Annotations)
	next.Webhooks = slices.Clone(cur.Webhooks)
	return &next
}

// finish returns cur when nothing changed, and otherwise a deep copy of
// next, which shares nothing with cur, with rec encoded.
func finish(cur, next *admissionregistrationv1.MutatingWebhookConfiguration, rec circuit.Record, changes []Change) (*admissionregistrationv1.MutatingWebhookConfiguration, []Change, error) {
	if len(changes) == 0 {
		return cur, nil, nil
	}
	annotations, err := circuit.Encode(next.Annotations, rec)
	if err != nil {
		return nil, nil, err
	}
	next.Annotations = annotations
	return next.DeepCopy(), changes, nil
}

// openWebhook applies mode to wh and reports whether anything changed.
func openWebhook(wh *admissionregistrationv1.MutatingWebhook, mode circuit.Mode) bool {
	changed := false
	if wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Ignore {
		wh.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		changed = true
	}
	if mode == circuit.ModeBypass && bypassIndex(wh) < 0 {
		wh.MatchConditions = append(slices.Clip(wh.MatchConditions), admissionregistrationv1.MatchCondition{Name: circuit.BypassCondition, Expression: circuit.BypassExpression})
		changed = true
	}
	return changed
}

// inPlace reports whether the changes entry records are still on wh.
func inPlace(wh *admissionregistrationv1.MutatingWebhook, entry circuit.Entry) bool {
	if wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Ignore {
		return false
	}
	return entry.Mode != circuit.ModeBypass || bypassIndex(wh) >= 0
}

// restore puts back what entry says was there, and removes the bypass
// marker. The guard forbids anyone else to touch either while open.
func restore(wh *admissionregistrationv1.MutatingWebhook, entry circuit.Entry) {
	wh.FailurePolicy = entry.OriginalFailurePolicy
	removeBypass(wh)
}

func removeBypass(wh *admissionregistrationv1.MutatingWebhook) {
	if i := bypassIndex(wh); i >= 0 {
		wh.MatchConditions = append(wh.MatchConditions[:i:i], wh.MatchConditions[i+1:]...)
		if len(wh.MatchConditions) == 0 {
			wh.MatchConditions = nil
		}
	}
}

func bypassIndex(wh *admissionregistrationv1.MutatingWebhook) int {
	for i, mc := range wh.MatchConditions {
		if mc.Name == circuit.BypassCondition {
			return i
		}
	}
	return -1
}

func webhook(mwc *admissionregistrationv1.MutatingWebhookConfiguration, name string) *admissionregistrationv1.MutatingWebhook {
	if i := index(mwc, name); i >= 0 {
		return &mwc.Webhooks[i]
	}
	return nil
}

func index(mwc *admissionregistrationv1.MutatingWebhookConfiguration, name string) int {
	for i := range mwc.Webhooks {
		if mwc.Webhooks[i].Name == name {
			return i
		}
	}
	return -1
}

// Backend names what serves wh, so that webhooks served by one backend
// can be counted as one: "service:<namespace>/<name>:<port>", or
// "url:<host>" (with its port) for a url webhook.
func Backend(wh *admissionregistrationv1.MutatingWebhook) string {
	cc := wh.ClientConfig
	switch {
	case cc.Service != nil:
		return fmt.Sprintf("service:%s/%s:%d", cc.Service.Namespace, cc.Service.Name, ptr.Deref(cc.Service.Port, 443))
	case cc.URL != nil:
		_, rest, _ := strings.Cut(*cc.URL, "://")
		host, _, _ := strings.Cut(rest, "/")
		return "url:" + host
	}
	return ""
}
