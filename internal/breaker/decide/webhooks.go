package decide

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
func planCopy(cur *circuit.ConfigView) *circuit.ConfigView {
	next := *cur
	next.Annotations = maps.Clone(cur.Annotations)
	next.Webhooks = slices.Clone(cur.Webhooks)
	return &next
}

// finish returns cur when nothing changed, and otherwise a deep copy of
// next, which shares nothing with cur, with rec encoded.
func finish(cur, next *circuit.ConfigView, rec circuit.Record, changes []Change) (*circuit.ConfigView, []Change, error) {
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
