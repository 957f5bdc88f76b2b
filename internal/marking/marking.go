package marking

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// ID is the short stable ID of a mutating webhook's circuit: 10 hex
// characters of the SHA-256 of "<configuration>/<webhook>", within label
// value limits whatever the names.
func ID(configuration, webhook string) string {
	sum := sha256.Sum256([]byte(configuration + "/" + webhook))
	return hex.EncodeToString(sum[:5])
}

// Name is the name of the circuit's marking policy and binding.
func Name(configuration, webhook string) string {
	return circuit.MarkingPolicyPrefix + ID(configuration, webhook)
}

// Labels are put on every marking policy and binding.
func Labels() map[string]string {
	return map[string]string{"app.kubernetes.io/name": "webhook-guard", "app.kubernetes.io/managed-by": "webhook-guard"}
}

// Note is the Annotation's value.
func Note(configuration, webhook string, openedAt time.Time) string {
	return fmt.Sprintf("%s/%s since %s", configuration, webhook, openedAt.UTC().Format(time.RFC3339))
}

// Render returns the marking policy and binding for wh, the bypassed
// webhook of configuration, open since openedAt, kept by breaker. The
// policy mirrors wh's match criteria exactly: its rules (for CREATE and
// UPDATE, the operations a mutation applies to), selectors, matchPolicy
// and its own matchConditions without the bypass marker. It only adds
// the unmutated label and annotation; failurePolicy Ignore and
// reinvocation Never. nil when the webhook matches no CREATE or UPDATE.
func Render(configuration string, wh admissionregistrationv1.MutatingWebhook, openedAt time.Time, breaker string) (*admissionregistrationv1.MutatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
	var rules []admissionregistrationv1.NamedRuleWithOperations
	for _, r := range wh.Rules {
		var ops []admissionregistrationv1.OperationType
		for _, op := range r.Operations {
			switch op {
			case admissionregistrationv1.OperationAll:
				ops = append(ops, admissionregistrationv1.Create, admissionregistrationv1.Update)
			case admissionregistrationv1.Create, admissionregistrationv1.Update:
				ops = append(ops, op)
			}
		}
		slices.Sort(ops)
		ops = slices.Compact(ops)
		if len(ops) == 0 {
			continue
		}
		rule := *r.DeepCopy()
		rule.Operations = ops
		rules = append(rules, admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: rule})
	}
	if len(rules) == 0 {
		return nil, nil
	}
	var conditions []admissionregistrationv1.MatchCondition
	for _, mc := range wh.MatchConditions {
		if mc.Name != circuit.BypassCondition {
			conditions = append(conditions, mc)
		}
	}
	name := Name(configuration, wh.Name)
	meta := metav1.ObjectMeta{
		Name:        name,
		Labels:      Labels(),
		Annotations: map[string]string{circuit.MarksAnnotation: configuration + "/" + wh.Name, circuit.MarkedByAnnotation: breaker},
	}
	failurePolicy := admissionregistrationv1.Ignore
	expression := fmt.Sprintf("Object{metadata: Object.metadata{labels: {%s: %s}, annotations: {%s: %s}}}",
		circuit.QuoteCEL(circuit.UnmutatedLabel), circuit.QuoteCEL(ID(configuration, wh.Name)),
		circuit.QuoteCEL(circuit.UnmutatedAnnotation), circuit.QuoteCEL(Note(configuration, wh.Name, openedAt)))
	policy := &admissionregistrationv1.MutatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "MutatingAdmissionPolicy"},
		ObjectMeta: meta,
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: wh.NamespaceSelector.DeepCopy(),
				ObjectSelector:    wh.ObjectSelector.DeepCopy(),
				MatchPolicy:       wh.MatchPolicy,
				ResourceRules:     rules,
			},
			MatchConditions: conditions,
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType:          admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: expression},
			}},
			FailurePolicy:      &failurePolicy,
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
		},
	}
	binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "MutatingAdmissionPolicyBinding"},
		ObjectMeta: *meta.DeepCopy(),
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name},
	}
	return policy, binding
}
