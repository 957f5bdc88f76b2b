package circuit

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Every field the circuit contract reads or owns (the annotations, and
// each webhook's failurePolicy and matchConditions) exists in both kinds of
// webhook configuration. The breaker and the rule therefore work on one
// shape, a MutatingWebhookConfiguration; a ValidatingWebhookConfiguration
// is seen through View and written back through Apply.

// View returns obj as a MutatingWebhookConfiguration: a deep copy of a
// mutating one, or a validating one's metadata and webhooks copied field by
// field (a validating webhook has every field of a mutating one but
// reinvocationPolicy).
func View(obj client.Object) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	switch o := obj.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		return o.DeepCopy(), nil
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		o = o.DeepCopy()
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

// Apply writes what the contract owns from view back onto obj, a copy of
// the object view was made from: the annotations, and each webhook's
// failurePolicy and matchConditions. It refuses a view whose webhooks are
// not obj's, in order, by name.
func Apply(obj client.Object, view *admissionregistrationv1.MutatingWebhookConfiguration) error {
	obj.SetAnnotations(view.Annotations)
	switch o := obj.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		o.Webhooks = view.Webhooks
		return nil
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		if len(o.Webhooks) != len(view.Webhooks) {
			return fmt.Errorf("view has %d webhooks, %s has %d", len(view.Webhooks), o.Name, len(o.Webhooks))
		}
		for i := range o.Webhooks {
			if o.Webhooks[i].Name != view.Webhooks[i].Name {
				return fmt.Errorf("view's webhook %d is %s, %s's is %s", i, view.Webhooks[i].Name, o.Name, o.Webhooks[i].Name)
			}
			o.Webhooks[i].FailurePolicy = view.Webhooks[i].FailurePolicy
			o.Webhooks[i].MatchConditions = view.Webhooks[i].MatchConditions
		}
		return nil
	}
	return fmt.Errorf("%T is not a webhook configuration", obj)
}

// New returns an empty object of kind k.
func (k Kind) New() client.Object {
	if k == KindValidating {
		return &admissionregistrationv1.ValidatingWebhookConfiguration{}
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{}
}
