package circuit

import (
	"encoding/json"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Every field the circuit contract reads or owns (the annotations, and
// each webhook's failurePolicy and matchConditions) exists in both kinds of
// webhook configuration. The breaker and the rule therefore work on one
// shape, a MutatingWebhookConfiguration; a ValidatingWebhookConfiguration
// is seen through View, and a change of either is written as Patch.

// ConfigView is a webhook configuration of either kind seen in the one
// shape the breaker and the rule work on (see View): a mutating one as it
// is, a validating one's fields copied into a MutatingWebhookConfiguration.
// It is an alias, so that a view is written, patched and deep-copied as
// the type it is; the name says which configurations a function accepts.
type ConfigView = admissionregistrationv1.MutatingWebhookConfiguration

// View returns obj as a MutatingWebhookConfiguration: a deep copy of a
// mutating one, or a validating one's metadata and webhooks copied field by
// field (a validating webhook has every field of a mutating one but
// reinvocationPolicy).
func View(obj client.Object) (*ConfigView, error) {
	return view(obj, true)
}

// ReadView is View without the copy: the view shares obj's memory, so
// neither may be changed while the other is used. It is for readers that
// look at every configuration on every probe, such as the probe runner.
func ReadView(obj client.Object) (*ConfigView, error) {
	return view(obj, false)
}

func view(obj client.Object, deep bool) (*ConfigView, error) {
	switch o := obj.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		if !deep {
			return o, nil
		}
		return o.DeepCopy(), nil
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		if deep {
			o = o.DeepCopy()
		}
		v := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: o.ObjectMeta}
		for _, w := range o.Webhooks {
			v.Webhooks = append(v.Webhooks, admissionregistrationv1.MutatingWebhook{
				Name:                    w.Name,
				ClientConfig:            w.ClientConfig,
				Rules:                   w.Rules,
				FailurePolicy:           w.FailurePolicy,
				MatchPolicy:             w.MatchPolicy,
				NamespaceSelector:       w.NamespaceSelector,
				ObjectSelector:          w.ObjectSelector,
				SideEffects:             w.SideEffects,
				TimeoutSeconds:          w.TimeoutSeconds,
				AdmissionReviewVersions: w.AdmissionReviewVersions,
				MatchConditions:         w.MatchConditions,
			})
		}
		return v, nil
	}
	return nil, fmt.Errorf("%T is not a webhook configuration", obj)
}

// Patch returns the JSON patch (RFC 6902) that takes the object seen as
// cur to next, for the fields the contract owns only: the annotations, and
// each webhook's failurePolicy and matchConditions. It also sets
// metadata.resourceVersion to cur's, so the apiserver refuses it with a
// Conflict if the object changed since it was read. Every other field,
// including ones this client's types do not know, is left to the server.
// next must hold cur's webhooks in cur's order.
func Patch(cur, next *admissionregistrationv1.MutatingWebhookConfiguration) ([]byte, error) {
	if len(cur.Webhooks) != len(next.Webhooks) {
		return nil, fmt.Errorf("the change has %d webhooks, %s has %d", len(next.Webhooks), cur.Name, len(cur.Webhooks))
	}
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value,omitempty"`
	}
	// No "test" ops: a failed test is an Invalid answer, which would be
	// taken for a refusal of the change itself; the resourceVersion
	// precondition already guarantees the object is the one read.
	ops := []op{{Op: "replace", Path: "/metadata/resourceVersion", Value: cur.ResourceVersion}}
	annotations := next.Annotations
	if annotations == nil {
		annotations = map[string]string{}
	}
	ops = append(ops, op{Op: "add", Path: "/metadata/annotations", Value: annotations})
	for i := range cur.Webhooks {
		c, n := &cur.Webhooks[i], &next.Webhooks[i]
		if c.Name != n.Name {
			return nil, fmt.Errorf("the change's webhook %d is %s, %s's is %s", i, n.Name, cur.Name, c.Name)
		}
		base := fmt.Sprintf("/webhooks/%d/", i)
		switch {
		case n.FailurePolicy != nil:
			ops = append(ops, op{Op: "add", Path: base + "failurePolicy", Value: *n.FailurePolicy})
		case c.FailurePolicy != nil:
			ops = append(ops, op{Op: "remove", Path: base + "failurePolicy"})
		}
		switch {
		case len(n.MatchConditions) > 0:
			ops = append(ops, op{Op: "add", Path: base + "matchConditions", Value: n.MatchConditions})
		case len(c.MatchConditions) > 0:
			ops = append(ops, op{Op: "remove", Path: base + "matchConditions"})
		}
	}
	return json.Marshal(ops)
}

// New returns an empty object of kind k.
func (k Kind) New() client.Object {
	if k == KindValidating {
		return &admissionregistrationv1.ValidatingWebhookConfiguration{}
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{}
}
