package admission_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/admission/admissiontest"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// FuzzHandler: whatever object bytes arrive, the static webhook answers:
// a decision, or 400 for what it cannot decode; it never panics and never
// admits an owned-field change it could not read.
func FuzzHandler(f *testing.F) {
	old := admissiontest.BypassOpen("cfg")
	oldRaw, _ := json.Marshal(old)
	newRaw, _ := json.Marshal(restoreFail(old))
	f.Add(oldRaw, newRaw, "mutatingwebhookconfigurations")
	f.Add(oldRaw, []byte(`{"metadata":"x"}`), "validatingwebhookconfigurations")
	f.Add([]byte(`null`), []byte(`{"kind":"Pod"}`), "mutatingwebhookconfigurations")
	h := &admission.Handler{Options: admission.Options{Managed: map[string][]string{"cfg": {admissiontest.ManagedWebhook}}, ManagedValidating: map[string][]string{"cfg": {admissiontest.ManagedWebhook}}}}
	f.Fuzz(func(t *testing.T, oldObj, newObj []byte, resource string) {
		req := ctrladmission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID: "u", Name: "cfg", Operation: admissionv1.Update,
			Resource:  metav1.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: resource},
			Object:    runtime.RawExtension{Raw: newObj},
			OldObject: runtime.RawExtension{Raw: oldObj},
		}}
		resp := h.Handle(context.Background(), req)
		if !resp.Allowed && resp.Result == nil {
			t.Fatal("a denial without a status")
		}
	})
}

// FuzzRule_CELAgreesWithGo builds an old and a new configuration from the
// input (owned and unowned fields, the bypass marker and the failurePolicy
// of a webhook that is not managed, metadata, records of any text, actors,
// kinds) and
// requires the rendered policy, compiled offline as kube-apiserver compiles
// it, to decide exactly as the Go rule and to say the same words.
func FuzzRule_CELAgreesWithGo(f *testing.F) {
	f.Add(uint8(0), uint8(1), uint8(0), admissiontest.CircuitRecord(circuit.ModeBypass, admissiontest.OpenedAt), "false")
	f.Add(uint8(3), uint8(7), uint8(1), `{"slow.mutator.webhook-guard.io":{"mode":"Ignore"}}`, "true")
	f.Add(uint8(255), uint8(2), uint8(2), `{garbage`, "")
	f.Add(uint8(4), uint8(5), uint8(8+16+32), admissiontest.CircuitRecord(circuit.ModeIgnore, admissiontest.OpenedAt), "generated-")
	// The breaker (65%5 is 0) and the release identity (69%5 is 4) switch
	// off the webhook that is not managed, the second with the override.
	f.Add(uint8(0), uint8(64), uint8(65), "", "false")
	f.Add(uint8(0), uint8(64+8), uint8(69), "", "handed over")
	// The release identity removes one entry of two (129 is 128+1, %5 is 4),
	// or changes an original.
	two := `{"gone.mutator.webhook-guard.io":{"mode":"Ignore"},"slow.mutator.webhook-guard.io":{"mode":"Ignore","originalFailurePolicy":"Fail"}}`
	f.Add(uint8(4+1), uint8(4+8), uint8(129), two, `"gone.mutator.webhook-guard.io":{"mode":"Ignore"},`)
	f.Add(uint8(4+1), uint8(4+8+1), uint8(129), two, `Fail`)
	hooks := map[string][]string{"cfg": {admissiontest.ManagedWebhook}}
	opts := admission.Options{BreakerUsername: breaker, Managed: hooks, ManagedValidating: hooks}
	compiled := map[bool]compiledPolicy{}
	f.Fuzz(func(t *testing.T, oldBits, newBits, who uint8, record, expression string) {
		p, ok := compiled[true]
		if !ok {
			p = compile(t, opts)
			compiled[true] = p
		}
		build := func(bits uint8) *admissionregistrationv1.MutatingWebhookConfiguration {
			obj := admissiontest.Healthy("cfg")
			hook := &obj.Webhooks[0]
			if bits&1 != 0 {
				ignore := admissionregistrationv1.Ignore
				hook.FailurePolicy = &ignore
			}
			if bits&2 != 0 {
				hook.MatchConditions = append(hook.MatchConditions, admissionregistrationv1.MatchCondition{Name: circuit.BypassCondition, Expression: "false"})
			}
			if bits&4 != 0 {
				obj.Annotations = map[string]string{circuit.Annotation: record}
			}
			if bits&8 != 0 {
				if obj.Annotations == nil {
					obj.Annotations = map[string]string{}
				}
				obj.Annotations[circuit.OverrideAnnotation] = expression
			}
			if bits&16 != 0 {
				five := int32(5)
				obj.Webhooks[1].TimeoutSeconds = &five
			}
			if bits&32 != 0 {
				obj.Labels["fuzz"] = "x"
			}
			if bits&64 != 0 && expression != "" {
				obj.Webhooks[1].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: circuit.BypassCondition, Expression: "false"}}
			}
			if bits&128 != 0 {
				obj.Webhooks = obj.Webhooks[:1]
			}
			return obj
		}
		old, new := build(oldBits), build(newBits)
		// The metadata the breaker may not change, on the new object only.
		if who&8 != 0 {
			new.OwnerReferences = []metav1.OwnerReference{admissiontest.Owner}
		}
		if who&16 != 0 {
			new.Finalizers = []string{admissiontest.Finalizer}
		}
		if who&32 != 0 {
			new.GenerateName = expression
		}
		// The failurePolicy of the webhook that is not managed, on the new
		// object only.
		if who&64 != 0 && len(new.Webhooks) > 1 {
			new.Webhooks[1].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		}
		// A new record that is the old one less a part of it: an entry, or
		// any other text.
		if _, ok := new.Annotations[circuit.Annotation]; ok && who&128 != 0 {
			new.Annotations[circuit.Annotation] = strings.Replace(record, expression, "", 1)
		}
		kind := circuit.KindMutating
		if who&4 != 0 {
			kind = circuit.KindValidating
		}
		users := []string{breaker, admissiontest.AdminUsername, admissiontest.OtherSAUsername, "weird\nuser", opts.Releaser()}
		user := admissiontest.UserInfo(admissiontest.Admin, breaker)
		user.Username = users[int(who)%len(users)]
		want := admission.Decide(admission.Request{Kind: kind, Operation: admissionv1.Update, Old: old, New: new, User: user}, opts)
		allowed, message := p.decide(t, kind, admissionv1.Update, old, new, user)
		if allowed != want.Allowed {
			t.Fatalf("Go %v (%s), CEL %v (%s)", want.Allowed, want.Message, allowed, message)
		}
		if !allowed && message != want.Message {
			t.Fatalf("messages differ:\nGo:  %s\nCEL: %s", want.Message, message)
		}
	})
}
