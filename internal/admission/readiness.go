package admission

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"

	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/parser"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// PolicyEnforced is the readiness signal: the policy and binding in the
// cluster are in place for this replica's breaker, whichever targets they
// name and whichever version rendered the rule. Only the leader writes the
// policy, for its own configuration; during a rollout that changes the
// targets or the rule, a new replica must be ready while the old leader's
// policy stands, or the rollout never completes.
//
// The policy's PolicyInputsAnnotation says what it was rendered from: its
// breaker, which must be this replica's, and its targets (a policy from
// before the annotation names its targets only in its CEL map literal,
// read by targetsFromCEL). The whole spec must then be a rule this replica
// renders for its breaker and those targets: this version's, or a
// recorded earlier version's (ruleKnown). Neither the identity nor the
// rule is read from CEL text, and no annotation vouches for a spec: a
// policy anyone changed, whatever they wrote in its annotations, is not in
// place, and neither is one a newer version wrote. The binding must be
// exactly the rendered one.
func PolicyEnforced(ctx context.Context, c client.Reader, opts Options) error {
	policy, binding := RenderPolicy(opts)
	live := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(policy), live); err != nil {
		return fmt.Errorf("ValidatingAdmissionPolicy %s: %w", policy.Name, err)
	}
	in, err := liveInputs(live)
	if err != nil {
		return fmt.Errorf("ValidatingAdmissionPolicy %s: %w", policy.Name, err)
	}
	if in.Breaker != "" && in.Breaker != opts.Breaker() {
		return fmt.Errorf("ValidatingAdmissionPolicy %s holds the rule of another breaker (%s), not of this one (%s)", policy.Name, in.Breaker, opts.Breaker())
	}
	if in.Releaser != "" && in.Releaser != opts.Releaser() {
		return fmt.Errorf("ValidatingAdmissionPolicy %s holds the rule of another release identity (%s), not of this one (%s)", policy.Name, in.Releaser, opts.Releaser())
	}
	known, err := ruleKnown(live.Spec, in.targets(opts))
	if err != nil {
		return fmt.Errorf("ValidatingAdmissionPolicy %s: %w", policy.Name, err)
	}
	if !known {
		return fmt.Errorf("ValidatingAdmissionPolicy %s is not a rule this version renders, or knows from an earlier version, for breaker %s and the targets the policy names: it was changed after a guard wrote it, or a newer version wrote it",
			policy.Name, opts.Breaker())
	}
	liveBinding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(binding), liveBinding); err != nil {
		return fmt.Errorf("ValidatingAdmissionPolicyBinding %s: %w", binding.Name, err)
	}
	if !equality.Semantic.DeepEqual(liveBinding.Spec, binding.Spec) {
		return fmt.Errorf("ValidatingAdmissionPolicyBinding %s differs from the rendered guard", binding.Name)
	}
	return nil
}

// How a replica knows the guard's rule (PolicyEnforced). A policy is
// enforced when its spec is, whole, a rule this replica can render itself
// for its own breaker and the targets the policy names: the rule of this
// version (RenderPolicy), or the rule of an earlier version, recorded in
// rules/. Nothing an editor of the policy can write makes another spec
// pass: the annotations only say which targets to render for, and a rule
// whose CEL differs from every known rendering is not enforced, however
// its annotations read.

// PolicyInputsAnnotation is on the guard's ValidatingAdmissionPolicy: what
// the guard rendered its rule from, as JSON (ruleInputs): the breaker's
// username, the release identity's and the managed webhooks of each kind. A replica reads the
// targets and the breaker there, in a structured place that no version's
// CEL changes, renders the rule again from them, and compares.
const PolicyInputsAnnotation = "webhook-guard.io/rule-inputs"

// ruleInputs is the content of PolicyInputsAnnotation.
type ruleInputs struct {
	// Breaker is the breaker's username the rule was rendered for; empty
	// for a policy written before PolicyInputsAnnotation.
	Breaker string `json:"breaker"`
	// Releaser is the release identity's username the rule was rendered
	// for (Options.Releaser); empty for a policy of a version without
	// one, whose rule names none.
	Releaser string `json:"releaser,omitempty"`
	// Mutating maps each managed MutatingWebhookConfiguration to its
	// managed webhooks, sorted (Options.Managed).
	Mutating map[string][]string `json:"mutating"`
	// Validating is Mutating for ValidatingWebhookConfigurations.
	Validating map[string][]string `json:"validating"`
}

// renderInputs renders PolicyInputsAnnotation for opts.
func renderInputs(opts Options) string {
	in := ruleInputs{Breaker: opts.Breaker(), Releaser: opts.Releaser(), Mutating: map[string][]string{}, Validating: map[string][]string{}}
	for _, kind := range kinds {
		m := in.Mutating
		if kind == circuit.KindValidating {
			m = in.Validating
		}
		for _, name := range opts.ConfigNames(kind) {
			m[name] = append([]string{}, opts.managedWebhooks(kind, name)...)
		}
	}
	data, err := json.Marshal(in)
	if err != nil {
		return "" // maps of strings always encode
	}
	return string(data)
}

// targets returns opts with in's targets.
func (in ruleInputs) targets(opts Options) Options {
	opts.Managed, opts.ManagedValidating = in.Mutating, in.Validating
	return opts
}

// liveInputs reads what policy was rendered from: its
// PolicyInputsAnnotation or, on a policy written before that annotation,
// the targets in its managed-names variable (targetsFromCEL) and no
// breaker.
func liveInputs(policy *admissionregistrationv1.ValidatingAdmissionPolicy) (ruleInputs, error) {
	if text, ok := policy.Annotations[PolicyInputsAnnotation]; ok {
		var in ruleInputs
		if err := json.Unmarshal([]byte(text), &in); err != nil {
			return ruleInputs{}, fmt.Errorf("its %s annotation cannot be read: %w", PolicyInputsAnnotation, err)
		}
		return in, nil
	}
	var expr string
	for _, v := range policy.Spec.Variables {
		if v.Name == managedVariable {
			expr = v.Expression
		}
	}
	mutating, validating, err := targetsFromCEL(expr)
	if err != nil {
		return ruleInputs{}, fmt.Errorf("it has no %s annotation, and its targets cannot be read from its %s variable: %w", PolicyInputsAnnotation, managedVariable, err)
	}
	return ruleInputs{Mutating: mutating, Validating: validating}, nil
}

// PolicyBreaker returns the breaker identity a live guard policy was
// rendered for, from its PolicyInputsAnnotation: a hint for telling
// installations apart, never evidence that the policy is enforced
// (PolicyEnforced compares the whole rule). False without a readable
// annotation.
func PolicyBreaker(policy *admissionregistrationv1.ValidatingAdmissionPolicy) (string, bool) {
	if _, ok := policy.Annotations[PolicyInputsAnnotation]; !ok {
		return "", false
	}
	in, err := liveInputs(policy)
	if err != nil || in.Breaker == "" {
		return "", false
	}
	return in.Breaker, true
}

// targetsFromCEL reads the targets of a policy written before
// PolicyInputsAnnotation from its managed-names variable, a CEL map
// literal from resource to configuration name to the list of its webhook
// names (celManagedMap). Only string literals are read; the rule rendered
// from them is compared whole, so only the literal that celManagedMap
// renders for them passes.
func targetsFromCEL(expr string) (mutating, validating map[string][]string, err error) {
	p, err := parser.NewParser()
	if err != nil {
		return nil, nil, err
	}
	tree, errs := p.Parse(common.NewTextSource(expr))
	if errs != nil && len(errs.GetErrors()) > 0 {
		return nil, nil, fmt.Errorf("not CEL: %s", errs.ToDisplayString())
	}
	entries := func(e ast.Expr) ([]ast.MapEntry, error) {
		if e.Kind() != ast.MapKind {
			return nil, fmt.Errorf("not a map literal")
		}
		var out []ast.MapEntry
		for _, entry := range e.AsMap().Entries() {
			out = append(out, entry.AsMapEntry())
		}
		return out, nil
	}
	str := func(e ast.Expr) (string, error) {
		if e.Kind() == ast.LiteralKind {
			if s, ok := e.AsLiteral().(types.String); ok {
				return string(s), nil
			}
		}
		return "", fmt.Errorf("not a string literal")
	}
	byResource, err := entries(tree.Expr())
	if err != nil {
		return nil, nil, err
	}
	mutating, validating = map[string][]string{}, map[string][]string{}
	for _, r := range byResource {
		resource, err := str(r.Key())
		if err != nil {
			return nil, nil, err
		}
		out := mutating
		if resource == circuit.KindValidating.Resource() {
			out = validating
		}
		byConfig, err := entries(r.Value())
		if err != nil {
			return nil, nil, err
		}
		for _, c := range byConfig {
			name, err := str(c.Key())
			if err != nil {
				return nil, nil, err
			}
			if c.Value().Kind() != ast.ListKind {
				return nil, nil, fmt.Errorf("%s: not a list literal", name)
			}
			hooks := []string{}
			for _, h := range c.Value().AsList().Elements() {
				hook, err := str(h)
				if err != nil {
					return nil, nil, err
				}
				hooks = append(hooks, hook)
			}
			out[name] = hooks
		}
	}
	return mutating, validating, nil
}

// ruleKnown reports whether spec is, whole, a rule for opts' breaker and
// targets that this version renders (RenderPolicy) or recorded from an
// earlier version (recordedRules).
func ruleKnown(spec admissionregistrationv1.ValidatingAdmissionPolicySpec, opts Options) (bool, error) {
	want, _ := RenderPolicy(opts)
	if equality.Semantic.DeepEqual(spec, want.Spec) {
		return true, nil
	}
	rules, err := recordedRules()
	if err != nil {
		return false, err
	}
	for _, rule := range rules {
		if equality.Semantic.DeepEqual(spec, instantiate(rule, opts)) {
			return true, nil
		}
	}
	return false, nil
}

// recordedRuleFiles are the rules of earlier versions of webhook-guard,
// and of this one, as recordRule renders them, one JSON file each, in the
// order the versions came: rules/01.json is the rule of 8746ea2 to
// 61fbb61, 02 of 21e6b26, 03 of 55b8706 to 702c761 (the versions that
// wrote circuit.PolicyDigestAnnotation and trusted it), 04 of 9e8d742 to
// 9e6c6ef (the first with PolicyInputsAnnotation), 05 the first whose CEL
// is written one clause a line, with comments, and binds the circuit
// package's names once, as variables, 06 of da72e61 to 5ca0e3b (the
// marking's arming entries allowed to the breaker), 07 the first that
// holds the release identity (Options.Releaser) to what a release changes. A replica recognises them
// (ruleKnown), so that a rollout to a version with a new rule completes
// while the old leader keeps the old rule in place;
// testdata/policy-NN.yaml is a policy the versions of rules/NN.json
// rendered, which the tests hold it to.
//
// A change to the rule is a change to recordRule's output: the test
// TestRecordedRules_holdThisVersionsRule then fails until the new rule is
// recorded (go test ./internal/admission -run TestRecordedRules -record).
// Never edit a file; delete one when no supported upgrade starts from the
// versions that rendered it.
//
//go:embed rules/*.json
var recordedRuleFiles embed.FS

// recordedRules returns the rules in recordedRuleFiles, in file order.
var recordedRules = sync.OnceValues(func() ([]admissionregistrationv1.ValidatingAdmissionPolicySpec, error) {
	names, err := fs.Glob(recordedRuleFiles, "rules/*.json")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	rules := make([]admissionregistrationv1.ValidatingAdmissionPolicySpec, 0, len(names))
	for _, name := range names {
		data, err := recordedRuleFiles.ReadFile(name)
		if err != nil {
			return nil, err
		}
		var rule admissionregistrationv1.ValidatingAdmissionPolicySpec
		if err := json.Unmarshal(data, &rule); err != nil {
			return nil, fmt.Errorf("recorded rule %s: %w", name, err)
		}
		rules = append(rules, rule)
	}
	return rules, nil
})

// breakerPlaceholder and releaserPlaceholder stand for the breaker's and
// the release identity's usernames in a recorded rule. They need no
// quoting in CEL, and no rule holds them otherwise.
const (
	breakerPlaceholder  = "${BREAKER}"
	releaserPlaceholder = "${RELEASER}"
)

// recordRule returns this version's rule as a recorded rule holds it:
// rendered for breakerPlaceholder and releaserPlaceholder, with no
// targets.
func recordRule() admissionregistrationv1.ValidatingAdmissionPolicySpec {
	p, _ := RenderPolicy(Options{BreakerUsername: breakerPlaceholder, ReleaserUsername: releaserPlaceholder})
	return p.Spec
}

// instantiate returns recorded rule for opts, as the version that
// recorded it renders it: its resourceNames and managed-names variable
// rendered from opts' targets, and opts' breaker in the place of
// breakerPlaceholder, quoted in CEL (circuit.QuoteCEL) and as it is in a
// message, and opts' release identity in the place of releaserPlaceholder
// alike. Every version since the first recorded one renders its targets
// and its breaker this way, and every one since the first with a release
// identity (rules/07.json) renders it this way; an earlier rule holds no
// releaserPlaceholder.
func instantiate(rule admissionregistrationv1.ValidatingAdmissionPolicySpec, opts Options) admissionregistrationv1.ValidatingAdmissionPolicySpec {
	out := *rule.DeepCopy()
	if mc := out.MatchConstraints; mc != nil {
		for i := range mc.ResourceRules {
			r := &mc.ResourceRules[i]
			for _, kind := range kinds {
				if slices.Equal(r.Resources, []string{kind.Resource()}) {
					r.ResourceNames = resourceNames(opts, kind)
				}
			}
		}
	}
	cel := strings.NewReplacer(
		circuit.QuoteCEL(breakerPlaceholder), circuit.QuoteCEL(opts.Breaker()),
		circuit.QuoteCEL(releaserPlaceholder), circuit.QuoteCEL(opts.Releaser()),
	).Replace
	message := strings.NewReplacer(breakerPlaceholder, opts.Breaker(), releaserPlaceholder, opts.Releaser()).Replace
	for i := range out.MatchConditions {
		out.MatchConditions[i].Expression = cel(out.MatchConditions[i].Expression)
	}
	for i := range out.Variables {
		v := &out.Variables[i]
		if v.Name == managedVariable {
			v.Expression = celManagedMap(opts)
			continue
		}
		v.Expression = cel(v.Expression)
	}
	for i := range out.Validations {
		v := &out.Validations[i]
		v.Expression, v.MessageExpression = cel(v.Expression), cel(v.MessageExpression)
		v.Message = message(v.Message)
	}
	for i := range out.AuditAnnotations {
		out.AuditAnnotations[i].ValueExpression = cel(out.AuditAnnotations[i].ValueExpression)
	}
	return out
}
