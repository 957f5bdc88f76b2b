package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// WebhookPath is the HTTP path at which the binary serves Handler.
const WebhookPath = "/validate-mutatingwebhookconfigurations"

// Handler implements controller-runtime admission.Handler; it decodes old/new
// MWC from the AdmissionRequest raw objects and calls Decide.
//
// Register it only behind the static manifest (RenderStaticWebhook): an
// API-registered ValidatingWebhookConfiguration is never called for
// mutatingwebhookconfigurations.
type Handler struct {
	// Options are the rule's options.
	Options Options
}

var _ admission.Handler = (*Handler)(nil)

// Handle decides one admission request. Denials carry code 403, reason
// Forbidden and Decision.Message; an
// object that cannot be decoded yields 400.
func (h *Handler) Handle(_ context.Context, req admission.Request) admission.Response {
	kind, guarded := guardedKind(req.Resource)
	if !guarded {
		return admission.Allowed(fmt.Sprintf("webhook-guard does not guard %s", req.Resource.String()))
	}

	in := Request{Kind: kind, Operation: req.Operation, User: req.UserInfo}
	var err error
	switch req.Operation {
	case admissionv1.Create:
		in.New, err = decodeView(kind, req.Object, "object")
	case admissionv1.Update:
		if in.New, err = decodeView(kind, req.Object, "object"); err == nil {
			in.Old, err = decodeView(kind, req.OldObject, "oldObject")
		}
	}
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}

	d := Decide(in, h.Options)
	if d.Allowed {
		return admission.Allowed(d.Reason)
	}
	return admission.Denied(d.Message)
}

// guardedKind maps a request's resource to the configuration kind the rule
// guards. An empty resource (a request built without one) is Mutating.
func guardedKind(r metav1.GroupVersionResource) (circuit.Kind, bool) {
	if r.Resource == "" {
		return circuit.KindMutating, true
	}
	for _, kind := range kinds {
		if r.Group == group && r.Resource == kind.Resource() {
			return kind, true
		}
	}
	return "", false
}

// decodeView decodes a webhook configuration of kind from a request's raw
// object, as its circuit.View.
func decodeView(kind circuit.Kind, raw runtime.RawExtension, field string) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	obj := kind.New()
	switch {
	case len(raw.Raw) > 0:
		if err := json.Unmarshal(raw.Raw, obj); err != nil {
			return nil, fmt.Errorf("webhook-guard: cannot decode %s as a %s: %w", field, kind.ObjectKind(), err)
		}
		if k := obj.GetObjectKind().GroupVersionKind().Kind; k != "" && k != kind.ObjectKind() {
			return nil, fmt.Errorf("webhook-guard: %s is a %s, not a %s", field, k, kind.ObjectKind())
		}
	case raw.Object != nil:
		o, ok := raw.Object.(client.Object)
		if !ok {
			return nil, fmt.Errorf("webhook-guard: %s is a %T", field, raw.Object)
		}
		obj = o
	default:
		return nil, fmt.Errorf("webhook-guard: request has no %s", field)
	}
	return circuit.View(obj)
}
