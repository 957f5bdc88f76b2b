package admission_test

import (
	"context"
	"fmt"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiserveradmission "k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/admission/admissiontest"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// benchConfiguration is a managed configuration of n webhooks, every one
// managed, shaped as kube-apiserver stores them (all defaults set).
func benchConfiguration(n int) (*admissionregistrationv1.MutatingWebhookConfiguration, admission.Options) {
	obj := admissiontest.Healthy("cfg")
	template := obj.Webhooks[0]
	equivalent := admissionregistrationv1.Equivalent
	never := admissionregistrationv1.NeverReinvocationPolicy
	scope := admissionregistrationv1.AllScopes
	template.MatchPolicy = &equivalent
	template.ReinvocationPolicy = &never
	template.NamespaceSelector = &metav1.LabelSelector{}
	template.Rules[0].Scope = &scope
	obj.Webhooks = nil
	var names []string
	for i := range n {
		h := *template.DeepCopy()
		h.Name = fmt.Sprintf("hook-%03d.bench.webhook-guard.io", i)
		url := fmt.Sprintf("https://127.0.0.1:1/hook-%03d", i)
		h.ClientConfig.URL = &url
		obj.Webhooks = append(obj.Webhooks, h)
		names = append(names, h.Name)
	}
	return obj, admission.Options{BreakerUsername: breaker, Managed: map[string][]string{"cfg": names}}
}

// BenchmarkPolicy_CEL evaluates the rendered policy, compiled as
// kube-apiserver compiles it, on the writes the policy sees most: an
// administrator's label update (allowed), the breaker opening one circuit
// (allowed), and an administrator restoring a failurePolicy (denied, with
// its message), for configurations of 1, 20 and 100 managed webhooks.
func BenchmarkPolicy_CEL(b *testing.B) {
	for _, n := range []int{1, 20, 100} {
		old, opts := benchConfiguration(n)
		p := compile(b, opts)
		label := old.DeepCopy()
		label.Labels["bench"] = "1"
		open := old.DeepCopy()
		hook := &open.Webhooks[n/2]
		ignore := admissionregistrationv1.Ignore
		hook.FailurePolicy = &ignore
		hook.MatchConditions = append(hook.MatchConditions, admissionregistrationv1.MatchCondition{Name: circuit.BypassCondition, Expression: circuit.BypassExpression})
		open.Annotations = map[string]string{circuit.Annotation: `{"` + hook.Name + `":{"mode":"Bypass"}}`}
		restore := open.DeepCopy()
		restore.Webhooks[n/2].FailurePolicy = old.Webhooks[n/2].FailurePolicy
		for _, w := range []struct {
			name     string
			user     string
			old, new *admissionregistrationv1.MutatingWebhookConfiguration
			allowed  bool
		}{
			{"label", admissiontest.AdminUsername, old, label, true},
			{"breaker opens", breaker, old, open, true},
			{"admin restores", admissiontest.AdminUsername, open, restore, false},
		} {
			// as kube-apiserver hands them to admission
			w.old, w.new = withGenerations(w.old, w.new)
			b.Run(fmt.Sprintf("webhooks=%d/%s", n, w.name), func(b *testing.B) {
				gvr := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}
				gvk := schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingWebhookConfiguration"}
				b.ReportAllocs()
				for b.Loop() {
					attr := apiserveradmission.NewAttributesRecord(w.new, w.old, gvk, "", "cfg", gvr, "", apiserveradmission.Operation(admissionv1.Update), nil, false, &user.DefaultInfo{Name: w.user})
					versioned := &apiserveradmission.VersionedAttributes{Attributes: attr, VersionedKind: gvk, VersionedObject: apiserveradmission.NewLazyObject(w.new), VersionedOldObject: apiserveradmission.NewLazyObject(w.old)}
					res := p.validator.Validate(context.Background(), gvr, versioned, nil, nil, celconfig.RuntimeCELCostBudget, nil)
					allowed := true
					for _, d := range res.Decisions {
						if d.Evaluation == validating.EvalError {
							b.Fatalf("CEL error: %s", d.Message)
						}
						if d.Action != validating.ActionAdmit {
							allowed = false
						}
					}
					if allowed != w.allowed {
						b.Fatalf("allowed %v, want %v: %+v", allowed, w.allowed, res.Decisions)
					}
				}
			})
		}
	}
}
