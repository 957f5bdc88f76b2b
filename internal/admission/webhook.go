package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
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
	if r := req.Resource; r.Resource != "" && (r.Group != mwcGroup || r.Resource != mwcResource) {
		return admission.Allowed(fmt.Sprintf("webhook-guard does not guard %s", r.String()))
	}

	in := Request{Operation: req.Operation, User: req.UserInfo}
	var err error
	switch req.Operation {
	case admissionv1.Create:
		in.New, err = decodeMWC(req.Object, "object")
	case admissionv1.Update:
		if in.New, err = decodeMWC(req.Object, "object"); err == nil {
			in.Old, err = decodeMWC(req.OldObject, "oldObject")
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

// decodeMWC decodes a MutatingWebhookConfiguration from a request's raw
// object.
func decodeMWC(raw runtime.RawExtension, field string) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	if len(raw.Raw) == 0 {
		if obj, ok := raw.Object.(*admissionregistrationv1.MutatingWebhookConfiguration); ok && obj != nil {
			return obj.DeepCopy(), nil
		}
		return nil, fmt.Errorf("webhook-guard: request has no %s", field)
	}
	obj := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := json.Unmarshal(raw.Raw, obj); err != nil {
		return nil, fmt.Errorf("webhook-guard: cannot decode %s as a MutatingWebhookConfiguration: %w", field, err)
	}
	if obj.Kind != "" && obj.Kind != "MutatingWebhookConfiguration" {
		return nil, fmt.Errorf("webhook-guard: %s is a %s, not a MutatingWebhookConfiguration", field, obj.Kind)
	}
	return obj, nil
}
