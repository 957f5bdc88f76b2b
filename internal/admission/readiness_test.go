package admission_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// policyFixture reads a policy and binding that an earlier version
// rendered, from testdata.
func policyFixture(t *testing.T, name string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	docs := strings.Split(string(data), "---\n")
	require.Len(t, docs, 2)
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[0]), p))
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[1]), b))
	return p, b
}

// enforcedWith runs PolicyEnforced for opts on a cluster holding objs.
func enforcedWith(t *testing.T, opts admission.Options, objs ...client.Object) error {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, admissionregistrationv1.AddToScheme(scheme))
	return admission.PolicyEnforced(context.Background(), fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build(), opts)
}

// fixtureOptions are the options testdata/policy-NN.yaml were rendered
// for, each by a version that rendered rules/NN.json.
var fixtureOptions = admission.Options{
	BreakerUsername:   circuit.DefaultUsername,
	Managed:           map[string][]string{"cfg": {"w.example.com", "v.example.com"}, "empty": nil},
	ManagedValidating: map[string][]string{"vcfg": {"x.example.com"}},
}

// TestPolicyEnforced_earlierVersionsRules: during a rollout from an
// earlier version (whose policy has another rule, and no inputs
// annotation), a new replica is ready while the old leader's policy
// stands, also when the rollout changes the targets; not for another
// breaker, and not once anyone changed that policy, whatever its digest.
func TestPolicyEnforced_earlierVersionsRules(t *testing.T) {
	this, _ := admission.RenderPolicy(fixtureOptions)
	for fixture, version := range map[string]string{
		"policy-01.yaml": "the rule of 8746ea2 to 61fbb61, from before digests",
		"policy-02.yaml": "the rule of 21e6b26, from before digests",
		"policy-03.yaml": "the rule of 55b8706 to 702c761, with a digest",
	} {
		t.Run(version, func(t *testing.T) {
			p, b := policyFixture(t, fixture)
			require.NotContains(t, p.Annotations, admission.PolicyInputsAnnotation)
			require.NotEqual(t, this.Spec, p.Spec, "the fixture is another version's rule")

			changed := enforcedAcrossARollout(t, p, b, "is not a rule this version renders")
			if _, ok := p.Annotations[circuit.PolicyDigestAnnotation]; ok {
				changed.Annotations[circuit.PolicyDigestAnnotation] = admission.RuleDigest(changed.Spec)
				assert.ErrorContains(t, enforcedWith(t, fixtureOptions, changed, b), "is not a rule this version renders", "with its digest recomputed")
			}
		})
	}
}

// TestPolicyEnforced_aChangedRuleIsNotEnforced: a policy anyone changed is
// not in place, whatever its annotations say: not with a rule digest
// recomputed for the changed rule, not without one (as versions before
// digests wrote it), not with targets that do not match its rule.
func TestPolicyEnforced_aChangedRuleIsNotEnforced(t *testing.T) {
	opts := admission.Options{Managed: map[string][]string{"cfg": {"w.example.com"}}, ManagedValidating: map[string][]string{"vcfg": {"x.example.com"}}}
	p, b := admission.RenderPolicy(opts)
	require.NoError(t, enforcedWith(t, opts, p, b))
	redigest := func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Annotations[circuit.PolicyDigestAnnotation] = admission.RuleDigest(p.Spec)
	}
	for name, change := range map[string]func(*admissionregistrationv1.ValidatingAdmissionPolicy){
		"a validation that admits everything, digest recomputed": func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[1].Expression = "true"
			redigest(p)
		},
		"the breaker's own limit removed, digest recomputed": func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].Expression = "true"
			redigest(p)
		},
		"a false matchCondition added, digest recomputed": func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConditions = append(p.Spec.MatchConditions, admissionregistrationv1.MatchCondition{Name: "off", Expression: "false"})
			redigest(p)
		},
		"failurePolicy Ignore, digest recomputed": func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
			redigest(p)
		},
		"the managed webhooks emptied in the CEL only": func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			for i, v := range p.Spec.Variables {
				if v.Name == "managedByResource" {
					p.Spec.Variables[i].Expression = "{'mutatingwebhookconfigurations': {}, 'validatingwebhookconfigurations': {}}"
				}
			}
		},
		"a validation changed, and no digest, as before digests": func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			delete(p.Annotations, circuit.PolicyDigestAnnotation)
			p.Spec.MatchConditions = nil
			p.Spec.Validations[1].Expression = "true"
		},
		"a validation changed, and no annotation at all": func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Annotations = nil
			p.Spec.Validations[1].Expression = "true"
		},
		"inputs that name other targets than the rule's": func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			q, _ := admission.RenderPolicy(admission.Options{Managed: map[string][]string{"other": {"o.example.com"}}})
			p.Annotations[admission.PolicyInputsAnnotation] = q.Annotations[admission.PolicyInputsAnnotation]
		},
		"inputs that cannot be read": func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Annotations[admission.PolicyInputsAnnotation] = "{"
		},
	} {
		t.Run(name, func(t *testing.T) {
			changed := p.DeepCopy()
			change(changed)
			assert.Error(t, enforcedWith(t, opts, changed, b))
		})
	}
}

// TestPolicyEnforced_identityIsNotReadFromCEL: an earlier version's rule
// that spells its breaker check in other CEL is in place for this
// replica's breaker (a release that rewrites that expression does not hang
// its own rollout), and another breaker's rule is told apart by the
// breaker named in the inputs annotation, never by CEL text.
func TestPolicyEnforced_identityIsNotReadFromCEL(t *testing.T) {
	earlier := admission.RecordRule()
	for i, v := range earlier.Variables {
		if v.Name == "isBreaker" {
			earlier.Variables[i].Expression = `has(request.userInfo.username) && request.userInfo.username == ` + circuit.QuoteCEL("${BREAKER}")
		}
	}
	admission.WithRecordedRule(t, earlier)
	opts := admission.Options{BreakerUsername: "system:serviceaccount:guard:breaker", Managed: map[string][]string{"cfg": {"w.example.com"}}}
	// The policy the earlier version's leader wrote for opts: its rule,
	// and the annotations it writes.
	leaders := func(opts admission.Options) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
		p, b := admission.RenderPolicy(opts)
		p.Spec = admission.Instantiate(earlier, opts)
		p.Annotations[circuit.PolicyDigestAnnotation] = admission.RuleDigest(p.Spec)
		return p, b
	}
	p, b := leaders(opts)
	this, _ := admission.RenderPolicy(opts)
	require.NotEqual(t, this.Spec, p.Spec)
	require.NoError(t, enforcedWith(t, opts, p, b), "the earlier version's rule for this breaker is in place")

	other := opts
	other.BreakerUsername = "system:serviceaccount:elsewhere:breaker"
	q, c := leaders(other)
	assert.ErrorContains(t, enforcedWith(t, opts, q, c), "holds the rule of another breaker (system:serviceaccount:elsewhere:breaker), not of this one (system:serviceaccount:guard:breaker)")
	q.Annotations[admission.PolicyInputsAnnotation] = p.Annotations[admission.PolicyInputsAnnotation]
	assert.ErrorContains(t, enforcedWith(t, opts, q, c), "is not a rule this version renders", "inputs that name this breaker do not make another breaker's rule this one's")
	delete(q.Annotations, admission.PolicyInputsAnnotation)
	assert.ErrorContains(t, enforcedWith(t, opts, q, c), "is not a rule this version renders", "nor do no inputs")
}

// TestPolicyEnforced_anyTargetsButNothingElse: readiness accepts the
// policy an old leader renders for other targets (a rollout that changes
// them must complete), and nothing else.
func TestPolicyEnforced_anyTargetsButNothingElse(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, admissionregistrationv1.AddToScheme(scheme))
	mine := admission.Options{Managed: map[string][]string{"cfg": {"w.example.com"}, "new": {"n.example.com"}}}
	theirs := admission.Options{Managed: map[string][]string{"cfg": {"w.example.com"}}}
	live := func(edit func(*admissionregistrationv1.ValidatingAdmissionPolicy)) error {
		p, b := admission.RenderPolicy(theirs)
		if edit != nil {
			edit(p)
		}
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(p, b).Build()
		return admission.PolicyEnforced(context.Background(), c, mine)
	}
	require.NoError(t, live(nil), "the old leader's policy for other targets is enforced")
	assert.Error(t, live(func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "off", Expression: "false"}}
	}))
	assert.Error(t, live(func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Spec.Validations = p.Spec.Validations[1:]
	}))
	p, b := admission.RenderPolicy(theirs)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(p, b).Build()
	problems, err := admission.PolicyProblems(context.Background(), c, mine)
	require.NoError(t, err)
	assert.NotEmpty(t, problems, "the leader still reports a policy for other targets than its own")
}

// TestPolicyEnforced_previousVersionsPolicy: during a rollout from the
// version before (rules/04.json, whose policy names its inputs in an
// annotation), a new replica is ready while the old leader's policy
// stands, also when the rollout changes the targets; not for another
// breaker, and not once anyone changed that policy.
func TestPolicyEnforced_previousVersionsPolicy(t *testing.T) {
	p, b := policyFixture(t, "policy-04.yaml")
	require.Contains(t, p.Annotations, admission.PolicyInputsAnnotation)
	this, _ := admission.RenderPolicy(fixtureOptions)
	require.NotEqual(t, this.Spec, p.Spec, "the fixture is another version's rule")

	enforcedAcrossARollout(t, p, b, "holds the rule of another breaker")
}

// enforcedAcrossARollout checks an earlier version's policy p and binding
// b as this version's replicas see them during a rollout: enforced, also
// when the rollout changes the targets; refused, with otherBreaker in the
// error, for another breaker; and refused once its last validation is
// changed. It returns that changed policy.
func enforcedAcrossARollout(t *testing.T, p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, otherBreaker string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	t.Helper()
	require.NoError(t, enforcedWith(t, fixtureOptions, p, b))
	added := fixtureOptions
	added.Managed = map[string][]string{"cfg": {"w.example.com"}, "new": {"n.example.com"}}
	require.NoError(t, enforcedWith(t, added, p, b), "a rollout that also changes the targets")

	other := fixtureOptions
	other.BreakerUsername = "system:serviceaccount:elsewhere:webhook-guard"
	assert.ErrorContains(t, enforcedWith(t, other, p, b), otherBreaker)

	changed := p.DeepCopy()
	changed.Spec.Validations[len(changed.Spec.Validations)-1].Expression = "true"
	assert.ErrorContains(t, enforcedWith(t, fixtureOptions, changed, b), "is not a rule this version renders")
	return changed
}

// TestPolicyEnforced_anotherReleaseIdentityIsNotThisOne: a policy rendered
// for another release identity is told apart by the identity its inputs
// annotation names, and inputs that name this one do not make its rule
// this replica's.
func TestPolicyEnforced_anotherReleaseIdentityIsNotThisOne(t *testing.T) {
	opts := admission.Options{BreakerUsername: "system:serviceaccount:guard:breaker", Managed: map[string][]string{"cfg": {"w.example.com"}}}
	p, b := admission.RenderPolicy(opts)
	require.NoError(t, enforcedWith(t, opts, p, b))

	other := opts
	other.ReleaserUsername = "system:serviceaccount:guard:someone-else"
	q, c := admission.RenderPolicy(other)
	assert.ErrorContains(t, enforcedWith(t, opts, q, c),
		"holds the rule of another release identity (system:serviceaccount:guard:someone-else), not of this one (system:serviceaccount:guard:breaker-release)")
	q.Annotations[admission.PolicyInputsAnnotation] = p.Annotations[admission.PolicyInputsAnnotation]
	assert.ErrorContains(t, enforcedWith(t, opts, q, c), "is not a rule this version renders", "inputs that name this release identity do not make another's rule this one's")
}
