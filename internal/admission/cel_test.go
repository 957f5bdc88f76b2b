package admission_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiserveradmission "k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/admission/admissiontest"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// compiledPolicy is the rendered ValidatingAdmissionPolicy compiled the way
// kube-apiserver v1.37 compiles it (validating.compilePolicy, which is not
// exported; Gatekeeper's k8scel driver does the same).
type compiledPolicy struct {
	validator validating.Validator
}

func compile(t testing.TB, opts admission.Options) compiledPolicy {
	t.Helper()
	policy, _ := admission.RenderPolicy(opts)
	compiler, err := cel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	require.NoError(t, err)
	vars := make([]cel.NamedExpressionAccessor, 0, len(policy.Spec.Variables))
	for _, v := range policy.Spec.Variables {
		vars = append(vars, &validating.Variable{Name: v.Name, Expression: v.Expression})
	}
	decls := cel.OptionalVariableDeclarations{}
	compiler.CompileAndStoreVariables(vars, decls, environment.StoredExpressions)
	var conditions []cel.ExpressionAccessor
	for i := range policy.Spec.MatchConditions {
		conditions = append(conditions, (*matchconditions.MatchCondition)(&policy.Spec.MatchConditions[i]))
	}
	var validations, messages []cel.ExpressionAccessor
	for _, v := range policy.Spec.Validations {
		validations = append(validations, &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason})
		messages = append(messages, &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression})
	}
	return compiledPolicy{validating.NewValidator(
		compiler.CompileCondition(validations, decls, environment.StoredExpressions),
		matchconditions.NewMatcher(compiler.CompileCondition(conditions, decls, environment.StoredExpressions), policy.Spec.FailurePolicy, "policy", "validate", policy.Name),
		compiler.CompileCondition(nil, decls, environment.StoredExpressions),
		compiler.CompileCondition(messages, decls, environment.StoredExpressions),
		policy.Spec.FailurePolicy,
		nil,
	)}
}

// decide evaluates the policy on one request. A CEL error fails the test:
// the policy must decide every request, not fall back to its failurePolicy.
//
// The request is evaluated twice: as built, without metadata.generation,
// and with the generations kube-apiserver would give the objects
// (withGenerations), which let the policy skip walking the webhooks when
// they are kept. Both must decide alike, with the same message.
func (p compiledPolicy) decide(t *testing.T, kind circuit.Kind, op admissionv1.Operation, old, new *admissionregistrationv1.MutatingWebhookConfiguration, u authenticationv1.UserInfo) (bool, string) {
	t.Helper()
	allowed, message := p.decideOnce(t, kind, op, old, new, u)
	gOld, gNew := withGenerations(old, new)
	gAllowed, gMessage := p.decideOnce(t, kind, op, gOld, gNew, u)
	require.Equal(t, allowed, gAllowed, "with generations as kube-apiserver sets them: %s", gMessage)
	require.Equal(t, message, gMessage, "with generations as kube-apiserver sets them")
	return allowed, message
}

// withGenerations returns copies of old and new with metadata.generation as
// kube-apiserver sets it before validating admission: 1 on create; on
// update the stored generation (here 7), plus one when the webhooks differ
// (the configuration strategies' PrepareForUpdate compares them with
// reflect.DeepEqual).
func withGenerations(old, new *admissionregistrationv1.MutatingWebhookConfiguration) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhookConfiguration) {
	new = new.DeepCopy()
	if old == nil {
		new.Generation = 1
		return nil, new
	}
	old = old.DeepCopy()
	old.Generation = 7
	new.Generation = old.Generation
	if !reflect.DeepEqual(old.Webhooks, new.Webhooks) {
		new.Generation++
	}
	return old, new
}

func (p compiledPolicy) decideOnce(t *testing.T, kind circuit.Kind, op admissionv1.Operation, old, new *admissionregistrationv1.MutatingWebhookConfiguration, u authenticationv1.UserInfo) (bool, string) {
	t.Helper()
	gvr := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: kind.Resource()}
	gvk := schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: kind.ObjectKind()}
	real := func(obj *admissionregistrationv1.MutatingWebhookConfiguration) runtime.Object {
		switch {
		case obj == nil:
			return nil
		case kind == circuit.KindValidating:
			return admissiontest.AsValidating(obj)
		}
		return obj
	}
	newObj, oldObj := real(new), real(old)
	attr := apiserveradmission.NewAttributesRecord(newObj, oldObj, gvk, "", new.Name, gvr, "", apiserveradmission.Operation(op), nil, false,
		&user.DefaultInfo{Name: u.Username, UID: u.UID, Groups: u.Groups})
	versioned := &apiserveradmission.VersionedAttributes{Attributes: attr, VersionedKind: gvk, VersionedObject: apiserveradmission.NewLazyObject(newObj), VersionedOldObject: apiserveradmission.NewLazyObject(oldObj)}
	res := p.validator.Validate(context.Background(), gvr, versioned, nil, nil, celconfig.RuntimeCELCostBudget, nil)
	if len(res.Decisions) == 0 {
		// The policy's matchCondition skipped it: admitted.
		return true, ""
	}
	var denials []string
	for _, d := range res.Decisions {
		require.NotEqual(t, validating.EvalError, d.Evaluation, "CEL error: %s", d.Message)
		if d.Action != validating.ActionAdmit {
			denials = append(denials, d.Message)
		}
	}
	require.LessOrEqual(t, len(denials), 1, "at most one validation may deny a request, so the message is one: %q", denials)
	if len(denials) == 1 {
		return false, denials[0]
	}
	return true, ""
}

// TestPolicy_CEL_agreesWithGo runs every case of the admissiontest table,
// and the hostile records of the Go rule's tests, through the rendered
// policy compiled offline with kube-apiserver's CEL, and requires the same
// decision and the same message, word for word, as the Go rule.
func TestPolicy_CEL_agreesWithGo(t *testing.T) {
	for i, c := range admissiontest.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			name := caseName(i)
			old, new := c.Build(name)
			opts := options(c, name)
			user := admissiontest.UserInfo(c.Actor, breaker)
			want := admission.Decide(admission.Request{Kind: c.Kind, Operation: admissionv1.Update, Old: old, New: new, User: user}, opts)
			allowed, message := compile(t, opts).decide(t, c.ConfigKind(), admissionv1.Update, old, new, user)
			require.Equal(t, c.WantAllowed, allowed, message)
			if !allowed {
				assert.Equal(t, want.Message, message)
			}
		})
	}
}

func TestPolicy_CEL_agreesWithGo_beyondTheTable(t *testing.T) {
	hooks := map[string][]string{"cfg": {admissiontest.ManagedWebhook, admissiontest.OtherWebhook, admissiontest.ManagedWebhook}}
	opts := admission.Options{BreakerUsername: breaker, Managed: hooks, ManagedValidating: hooks}
	p := compile(t, opts)
	type req struct {
		op       admissionv1.Operation
		old, new *admissionregistrationv1.MutatingWebhookConfiguration
	}
	var reqs = map[string]req{}
	open := admissiontest.BypassOpen("cfg")
	for i, record := range []string{
		`{not json`, ``, `null`, `[]`, `"a string"`,
		`{"slow.mutator.webhook-guard.io":"not an object"}`,
		`{"slow.mutator.webhook-guard.io":{"openedAt":42,"originalFailurePolicy":["x"]}}`,
		`{"slow.mutator.webhook-guard.io":null}`,
		"{\"slow.mutator.webhook-guard.io\":{\"openedAt\":\"line\\nbreak\",\"mode\":\"By\\rpass\"}}",
		"{\"slow.mutator.webhook-guard.io\":{\"openedAt\":\"line\nbreak\",\"mode\":\"By\tpass\"}}",
		"{\n  \"pretty\": \"printed\"\n}",
		`{"other.mutator.webhook-guard.io":{"mode":"Ignore","reason":"été"},"slow.mutator.webhook-guard.io":{"mode":"Bypass"}}`,
		// The original failurePolicy as the release identity may restore it.
		`{"slow.mutator.webhook-guard.io":{"originalFailurePolicy":"Fail"}}`,
		`{"slow.mutator.webhook-guard.io":{"originalFailurePolicy":"Ignore"}}`,
		`{"slow.mutator.webhook-guard.io":{"originalFailurePolicy":null}}`,
		`{"slow.mutator.webhook-guard.io":{"originalFailurePolicy":"Fail\"}"}}`,
		`{"slow.mutator.webhook-guard.io":{"mode":"Bypass"},"x":{"originalFailurePolicy":"Fail"}}`,
		`{"slow.mutator.webhook-guard.io":{"originalFailurePolicy":"Fail"}, "slow.mutator.webhook-guard.io":{"originalFailurePolicy":"Ignore"}}`,
		`{"slowXmutator.webhook-guard.io":{"originalFailurePolicy":"Fail"}}`,
	} {
		old := open.DeepCopy()
		old.Annotations[circuit.Annotation] = record
		reqs[fmt.Sprintf("record %d restores Fail", i)] = req{admissionv1.Update, old, restoreFail(old)}
		n := old.DeepCopy()
		delete(n.Annotations, circuit.Annotation)
		n.Annotations[circuit.OverrideAnnotation] = ""
		reqs[fmt.Sprintf("record %d removed with an empty override", i)] = req{admissionv1.Update, old, n}
		// What "guard release" writes: the failurePolicy back, the marker
		// and the record gone, the override added; or, where the original
		// is unset, the field removed.
		released := restoreFail(old)
		released.Webhooks[0].MatchConditions = nil
		delete(released.Annotations, circuit.Annotation)
		released.Annotations[circuit.OverrideAnnotation] = "guard release"
		reqs[fmt.Sprintf("record %d released", i)] = req{admissionv1.Update, old, released}
		unsetBack := released.DeepCopy()
		unsetBack.Webhooks[0].FailurePolicy = nil
		reqs[fmt.Sprintf("record %d released to unset", i)] = req{admissionv1.Update, old, unsetBack}
		repointed := released.DeepCopy()
		url := "https://127.0.0.1:2/elsewhere"
		repointed.Webhooks[1].ClientConfig.URL = &url
		reqs[fmt.Sprintf("record %d released and the other webhook repointed", i)] = req{admissionv1.Update, old, repointed}
		// The release identity may keep a record or remove entries from
		// it, never write one of its own.
		kept := old.DeepCopy()
		kept.Annotations[circuit.OverrideAnnotation] = "guard release"
		reqs[fmt.Sprintf("record %d kept with the override", i)] = req{admissionv1.Update, old, kept}
		forged := kept.DeepCopy()
		forged.Annotations[circuit.Annotation] = `{"slow.mutator.webhook-guard.io":{"originalFailurePolicy":"Ignore"}}`
		reqs[fmt.Sprintf("record %d replaced by a forged original", i)] = req{admissionv1.Update, old, forged}
		healthy := admissiontest.Healthy("cfg")
		healthy.Annotations = map[string]string{circuit.Annotation: record}
		ignored := healthy.DeepCopy()
		ignored.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		ignored.Annotations[circuit.OverrideAnnotation] = "guard release"
		reqs[fmt.Sprintf("record %d and Fail set to Ignore", i)] = req{admissionv1.Update, healthy, ignored}
	}
	unset := admissiontest.Healthy("cfg")
	unset.Webhooks[0].FailurePolicy = nil
	reqs["unset to Fail"] = req{admissionv1.Update, unset, restoreFail(unset)}
	both := admissiontest.BypassOpen("cfg")
	both2 := both.DeepCopy()
	for i := range both2.Webhooks {
		ignore := admissionregistrationv1.Ignore
		both2.Webhooks[i].FailurePolicy = &ignore
		both2.Webhooks[i].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: circuit.BypassCondition, Expression: "true"}}
	}
	reqs["every owned field of two webhooks"] = req{admissionv1.Update, both, both2}
	forged := admissiontest.Healthy("cfg")
	forged.Annotations = map[string]string{circuit.Annotation: admissiontest.CircuitRecord(circuit.ModeIgnore, admissiontest.OpenedAt)}
	reqs["a forged record on CREATE"] = req{admissionv1.Create, nil, forged}
	reqs["a healthy configuration on CREATE"] = req{admissionv1.Create, nil, admissiontest.Healthy("cfg")}

	for name, r := range reqs {
		t.Run(name, func(t *testing.T) {
			for _, kind := range []circuit.Kind{circuit.KindMutating, circuit.KindValidating} {
				for _, u := range []authenticationv1.UserInfo{admin(), {Username: "weird\nuser\t\"x\""}, admissiontest.UserInfo(admissiontest.Breaker, breaker), admissiontest.UserInfo(admissiontest.Releaser, breaker)} {
					want := admission.Decide(admission.Request{Kind: kind, Operation: r.op, Old: r.old, New: r.new, User: u}, opts)
					allowed, message := p.decide(t, kind, r.op, r.old, r.new, u)
					require.Equal(t, want.Allowed, allowed, "Go: %s; CEL: %s", want.Message, message)
					if !allowed {
						assert.Equal(t, want.Message, message)
					}
				}
			}
		})
	}
}
