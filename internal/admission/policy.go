package admission

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// PolicyName is the name of the default installation's
// ValidatingAdmissionPolicy and binding; Options.Policy gives an
// instance's.
const PolicyName = "webhook-guard"

// noManagedConfigurationName is the only resourceName of a policy rendered
// with no managed configuration. It contains ':', which a
// MutatingWebhookConfiguration name (a DNS subdomain) cannot, so the policy
// matches nothing; an empty resourceNames list would match every
// configuration instead.
const noManagedConfigurationName = "webhook-guard:no-managed-configurations"

const (
	group   = "admissionregistration.k8s.io"
	version = "v1"
)

// kinds are the configuration kinds the guard covers, in rendering order.
var kinds = []circuit.Kind{circuit.KindMutating, circuit.KindValidating}

// Labels returns the labels put on every object this package renders.
func Labels() map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":       "webhook-guard",
		"app.kubernetes.io/managed-by": "webhook-guard",
	}
}

// RenderPolicy renders the ownership rule as a ValidatingAdmissionPolicy named
// opts.Policy() and its binding (validationActions Deny). kube-apiserver
// evaluates it in-process, so it holds even while webhook-guard is down.
//
// The policy matches CREATE and UPDATE of the managed configurations of
// both kinds by name. A kind with no managed configuration matches a name
// no configuration can have, never every configuration. Both objects carry TypeMeta and Labels.
// The policy carries PolicyInputsAnnotation, what it was rendered from,
// and circuit.PolicyDigestAnnotation, for replicas of earlier versions.
func RenderPolicy(opts Options) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	failurePolicy := admissionregistrationv1.Fail
	matchPolicy := admissionregistrationv1.Equivalent
	scope := admissionregistrationv1.ClusterScope
	var rules []admissionregistrationv1.NamedRuleWithOperations
	for _, kind := range kinds {
		rules = append(rules, admissionregistrationv1.NamedRuleWithOperations{
			ResourceNames: resourceNames(opts, kind),
			RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups:   []string{group},
					APIVersions: []string{version},
					Resources:   []string{kind.Resource()},
					Scope:       &scope,
				},
			},
		})
	}

	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta: metav1.TypeMeta{
			APIVersion: admissionregistrationv1.SchemeGroupVersion.String(),
			Kind:       "ValidatingAdmissionPolicy",
		},
		ObjectMeta: metav1.ObjectMeta{Name: opts.Policy(), Labels: Labels()},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &failurePolicy,
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       ownedMayChangeCondition,
				Expression: ownedMayChangeCEL(opts.Breaker()),
			}},
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
				MatchPolicy:       &matchPolicy,
				ResourceRules:     rules,
			},
			Variables: policyVariables(opts),
			Validations: []admissionregistrationv1.Validation{{
				Expression:        breakerValidationExpression,
				MessageExpression: onDenial(breakerValidationExpression, breakerDenialCEL(opts.Breaker())),
				Message:           fmt.Sprintf("webhook-guard's own identity (%s) may change only the fields it owns", opts.Breaker()),
				Reason:            ptr.To(metav1.StatusReasonForbidden),
			}, {
				Expression:        validationExpression,
				MessageExpression: onDenial(validationExpression, messageCEL(opts.Breaker())),
				Message: fmt.Sprintf("fields owned by webhook-guard (%s) may not be changed; to hand the configuration over, run: %s",
					opts.Breaker(), AnnotateCommand("<kind>", "<name>", false)),
				Reason: ptr.To(metav1.StatusReasonForbidden),
			}},
		},
	}
	policy.Annotations = map[string]string{
		// Read by no replica of this version (PolicyEnforced compares
		// content instead); written so that a replica of the version
		// before, which reads it, is ready during a rollout or a rollback.
		circuit.PolicyDigestAnnotation: ruleDigest(policy.Spec),
		PolicyInputsAnnotation:         renderInputs(opts),
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta: metav1.TypeMeta{
			APIVersion: admissionregistrationv1.SchemeGroupVersion.String(),
			Kind:       "ValidatingAdmissionPolicyBinding",
		},
		ObjectMeta: metav1.ObjectMeta{Name: opts.Policy(), Labels: Labels()},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        opts.Policy(),
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return policy, binding
}

// resourceNames are the names the policy matches for kind: its managed
// configurations, or noManagedConfigurationName when it has none.
func resourceNames(opts Options, kind circuit.Kind) []string {
	names := opts.ConfigNames(kind)
	if len(names) == 0 {
		return []string{noManagedConfigurationName}
	}
	return names
}

// ruleDigest is a digest of spec without its targets (the resource names
// and the managed-names variable): the same for every guard that renders
// the same rule. Anyone who can edit the policy can recompute it, so this
// version never trusts it (PolicyEnforced).
func ruleDigest(spec admissionregistrationv1.ValidatingAdmissionPolicySpec) string {
	spec = *spec.DeepCopy()
	if spec.MatchConstraints != nil {
		for i := range spec.MatchConstraints.ResourceRules {
			spec.MatchConstraints.ResourceRules[i].ResourceNames = nil
		}
	}
	for i := range spec.Variables {
		if spec.Variables[i].Name == managedVariable {
			spec.Variables[i].Expression = ""
		}
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return "" // a spec always encodes; an empty digest matches nothing
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}

// onDenial renders a messageExpression that builds message only when
// validation denies, and is the empty string otherwise. kube-apiserver
// evaluates every messageExpression of a policy on every request it
// matches, admitted or not, and uses the result only on denial; without
// the guard, each admitted write would also pay for the message's
// variables (the open circuits' notes, the breaker's other changes).
func onDenial(validation, message string) string {
	return "(" + validation + ") ? '' : " + message
}

// ownedMayChangeCondition names the policy's matchCondition.
const ownedMayChangeCondition = "owned-fields-may-change"

// ownedMayChangeCEL renders the policy's matchCondition: false, so that
// kube-apiserver skips the policy (no variable, validation or message is
// evaluated), only for a request the rule always admits: an UPDATE, not by
// the breaker, that keeps the webhooks (equal metadata.generation, see the
// webhooksKept variable) and the circuit record. Then no owned field
// changes, and only the breaker's identity is limited to owned fields.
// These are most writes to a managed configuration (labels, annotations).
func ownedMayChangeCEL(breaker string) string {
	annotation := circuit.QuoteCEL(circuit.Annotation)
	hasRecord := func(obj string) string {
		return fmt.Sprintf(`(has(%s.metadata.annotations) && %s in %s.metadata.annotations)`, obj, annotation, obj)
	}
	return strings.Join([]string{
		`oldObject == null`,
		`has(request.userInfo.username) && request.userInfo.username == ` + circuit.QuoteCEL(breaker),
		`!has(object.metadata.generation) || !has(oldObject.metadata.generation) || object.metadata.generation != oldObject.metadata.generation`,
		hasRecord("object") + ` != ` + hasRecord("oldObject"),
		fmt.Sprintf(`%s && object.metadata.annotations[%s] != oldObject.metadata.annotations[%s]`, hasRecord("object"), annotation, annotation),
	}, " || ")
}

// validationExpression admits the request unless it changes owned fields of
// a managed configuration without being the breaker or carrying an override.
// sameOwned with the same circuit record is the common case of no owned
// change, decided without listing the changes.
const validationExpression = `!variables.isManaged || variables.isBreaker || variables.override || variables.sameOwned && variables.circuit == variables.oldCircuit || size(variables.ownedChanges) == 0`

// managedVariable names the policy variable that holds the targets: the
// only part of the policy, with the resourceNames, that depends on them.
const managedVariable = "managedByResource"

// breakerValidationExpression admits the request unless the breaker's own
// identity updates more than the owned fields of a managed configuration.
const breakerValidationExpression = `!variables.isManaged || !variables.isBreaker || oldObject == null || size(variables.unownedChanges) == 0`

// policyVariables renders the policy's variables; each may use the ones
// before it. They compute what ownedChanges and openNotes compute in Go.
func policyVariables(opts Options) []admissionregistrationv1.Variable {
	marker := circuit.QuoteCEL(circuit.BypassCondition)
	annotation := circuit.QuoteCEL(circuit.Annotation)
	override := circuit.QuoteCEL(circuit.OverrideAnnotation)
	policyOf := func(w string) string {
		return fmt.Sprintf(`(has(%s.failurePolicy) && %s.failurePolicy != '' ? %s.failurePolicy : %s)`, w, w, w, circuit.QuoteCEL(circuit.Unset))
	}
	// markerOf renders the bypass marker of webhook w as a list of zero or
	// one expression (the first matchCondition so named).
	markerOf := func(w string) string {
		return fmt.Sprintf(`(has(%s.matchConditions) && %s.matchConditions.exists(c, c.name == %s) ? [%s.matchConditions.filter(c, c.name == %s)[0].expression] : [])`,
			w, w, marker, w, marker)
	}
	// at renders the element of the aligned list that belongs to the first
	// webhook named n in names: a native lookup, not a comprehension.
	at := func(list, names, n string) string {
		return fmt.Sprintf(`%s[%s.indexOf(%s)]`, list, names, n)
	}
	// markerNamed renders the bypass marker of the first webhook named n on
	// one side, [] when there is none.
	markerNamed := func(side, n string) string {
		return fmt.Sprintf(`(%s in variables.%sNames ? %s : [])`, n, side, at("variables."+side+"Markers", "variables."+side+"Names", n))
	}
	vars := []struct{ name, expr string }{
		// managed webhook names by resource and configuration name, rendered from Options.
		{managedVariable, celManagedMap(opts)},
		{"managedByConfig", `request.resource.resource in variables.managedByResource ? variables.managedByResource[request.resource.resource] : {}`},
		{"kindName", fmt.Sprintf(`request.resource.resource == %s ? %s : %s`, circuit.QuoteCEL(circuit.KindValidating.Resource()),
			circuit.QuoteCEL(circuit.KindValidating.Singular()), circuit.QuoteCEL(circuit.KindMutating.Singular()))},
		{"isManaged", `object.metadata.name in variables.managedByConfig`},
		{"managed", `variables.isManaged ? variables.managedByConfig[object.metadata.name] : []`},
		{"isBreaker", `request.userInfo.username == ` + circuit.QuoteCEL(opts.Breaker())},
		{"annotations", `has(object.metadata.annotations) ? object.metadata.annotations : {}`},
		{"oldAnnotations", `oldObject != null && has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}`},
		{"override", fmt.Sprintf(`%s in variables.annotations && variables.annotations[%s] != ''`, override, override)},
		{"newWebhooks", `has(object.webhooks) ? object.webhooks : []`},
		{"oldWebhooks", `oldObject != null && has(oldObject.webhooks) ? oldObject.webhooks : []`},
		// Whether kube-apiserver found the webhooks unchanged. It sets
		// metadata.generation to 1 on create and, on update, keeps the stored
		// one unless the webhooks differ (rest.BeforeUpdate, then the
		// configuration strategy's PrepareForUpdate, both before validating
		// admission). Equal generations therefore mean equal webhooks: no
		// webhook field changed, owned or not, and nothing below needs to walk
		// the lists. That is most writes by others (labels, annotations) and
		// the breaker's own record updates. An object without a generation
		// (as offline evaluations build them) takes the comparisons below.
		{"webhooksKept", `oldObject != null && has(object.metadata.generation) && has(oldObject.metadata.generation) && object.metadata.generation == oldObject.metadata.generation`},
		// the webhooks' names and owned fields, in list order: the webhook
		// named n is at names.indexOf(n), the first one so named, as the Go
		// rule's findHook finds it.
		{"newNames", `variables.newWebhooks.map(w, w.name)`},
		{"oldNames", `variables.oldWebhooks.map(o, o.name)`},
		{"newPolicies", fmt.Sprintf(`variables.newWebhooks.map(w, %s)`, policyOf("w"))},
		{"oldPolicies", fmt.Sprintf(`variables.oldWebhooks.map(o, %s)`, policyOf("o"))},
		// each webhook's bypass marker, as a list of zero or one expression.
		{"newMarkers", fmt.Sprintf(`variables.newWebhooks.map(w, %s)`, markerOf("w"))},
		{"oldMarkers", fmt.Sprintf(`variables.oldWebhooks.map(o, %s)`, markerOf("o"))},
		// Whether no owned field of a webhook changed: the webhooks are kept,
		// or have the same names in the same order with the same
		// failurePolicies and markers (a caBundle rotation, say). Then the
		// lookups by name below are skipped. Comparing these lists of strings
		// is cheaper than comparing the webhooks themselves.
		{"sameOwned", `variables.webhooksKept || variables.oldNames == variables.newNames && variables.oldPolicies == variables.newPolicies && variables.oldMarkers == variables.newMarkers`},
		// managed webhooks, present on both sides, whose failurePolicy differs, in old order.
		{"failurePolicyChanges", fmt.Sprintf(`variables.sameOwned ? [] : variables.oldWebhooks.filter(o, o.name in variables.managed && o.name in variables.newNames && %s != %s).map(o, 'webhooks[name=' + o.name + '].failurePolicy (' + %s + ' -> ' + %s + ')')`,
			at("variables.newPolicies", "variables.newNames", "o.name"), policyOf("o"), policyOf("o"), at("variables.newPolicies", "variables.newNames", "o.name"))},
		// webhooks (new ones, then removed ones) whose bypass marker was added, removed or altered.
		{"bypassChanges", fmt.Sprintf(`variables.sameOwned ? [] : (variables.newNames + variables.oldNames.filter(n, !(n in variables.newNames))).filter(n, %s != %s).map(n, 'webhooks[name=' + n + '].matchConditions[name=' + %s + '] (' + (size(%s) == 0 ? 'added' : size(%s) == 0 ? 'removed' : 'changed') + ')')`,
			markerNamed("new", "n"), markerNamed("old", "n"), marker, markerNamed("old", "n"), markerNamed("new", "n"))},
		// the circuit record as a list of zero or one value.
		{"circuit", fmt.Sprintf(`%s in variables.annotations ? [variables.annotations[%s]] : []`, annotation, annotation)},
		{"oldCircuit", fmt.Sprintf(`%s in variables.oldAnnotations ? [variables.oldAnnotations[%s]] : []`, annotation, annotation)},
		{"circuitChanges", fmt.Sprintf(`variables.circuit != variables.oldCircuit ? [%s + (size(variables.oldCircuit) == 0 ? 'added' : size(variables.circuit) == 0 ? 'removed' : 'changed') + ')'] : []`,
			circuit.QuoteCEL(circuitPath+" ("))},
		{"ownedChanges", `variables.failurePolicyChanges + variables.bypassChanges + variables.circuitChanges`},
		// what else changes, as unownedChanges lists it in Go.
		{"labelsChanged", `(has(object.metadata.labels) ? object.metadata.labels : {}) != (oldObject != null && has(oldObject.metadata.labels) ? oldObject.metadata.labels : {})`},
		{"annotationsChanged", fmt.Sprintf(`variables.annotations.filter(k, k != %s).exists(k, !(k in variables.oldAnnotations) || variables.oldAnnotations[k] != variables.annotations[k]) || variables.oldAnnotations.filter(k, k != %s).exists(k, !(k in variables.annotations))`, annotation, annotation)},
		// the other metadata the breaker may not change (breakerMetadata),
		// each named as the denial names it.
		{"metadataChanges", metadataChangesCEL()},
		{"webhookSetChanged", `!variables.webhooksKept && variables.oldNames != variables.newNames`},
		// each new webhook whose unowned fields differ from the first old one
		// of its name (o, bound by a comprehension over one element).
		{"webhooksChanged", fmt.Sprintf(`variables.webhooksKept ? [] : variables.newWebhooks.filter(w, w.name in variables.oldNames && [%s].exists(o, !(o == w || %s))).map(w, 'webhooks[name=' + w.name + ']')`,
			at("variables.oldWebhooks", "variables.oldNames", "w.name"), sameUnowned(marker))},
		{"unownedChanges", `(variables.labelsChanged ? ['metadata.labels'] : []) + (variables.annotationsChanged ? ['metadata.annotations'] : []) + variables.metadataChanges + (variables.webhookSetChanged ? ['webhooks (added, removed or reordered)'] : []) + variables.webhooksChanged`},
		// the stored record's text, '' when there is none.
		{"oldRecord", `size(variables.oldCircuit) == 0 ? '' : variables.oldCircuit[0]`},
		// [name, entry text] of each managed webhook with an entry in the stored record.
		{"openEntries", fmt.Sprintf(`variables.managed.filter(n, %s).map(n, [n, %s])`,
			circuit.HasEntryCEL("variables.oldRecord", "n"), circuit.EntryTextCEL("variables.oldRecord", "n"))},
		// the open circuits of managed webhooks, read from their entries.
		{"openNotes", fmt.Sprintf(`variables.openEntries.map(e, %s)`, circuit.NoteCEL("e[1]", "e[0]"))},
	}
	out := make([]admissionregistrationv1.Variable, 0, len(vars))
	for _, v := range vars {
		out = append(out, admissionregistrationv1.Variable{Name: v.name, Expression: v.expr})
	}
	return out
}

// metadataChangesCEL renders the list of breakerMetadata fields that differ
// between oldObject and object, as unownedChanges names them; an absent
// field is the same as an empty one, as when stored.
func metadataChangesCEL() string {
	parts := make([]string, 0, len(breakerMetadata))
	for _, f := range breakerMetadata {
		parts = append(parts, fmt.Sprintf(`((has(object.metadata.%[1]s) ? object.metadata.%[1]s : %[2]s) != (oldObject != null && has(oldObject.metadata.%[1]s) ? oldObject.metadata.%[1]s : %[2]s) ? [%[3]s] : [])`,
			f.name, f.absent, circuit.QuoteCEL(f.change())))
	}
	return strings.Join(parts, " + ")
}

// sameUnowned renders, for webhooks o and w, whether every field the
// breaker does not own is the same: a field is the same when both lack it
// or both hold equal values. A managed webhook's failurePolicy and the
// bypass marker are left out.
func sameUnowned(marker string) string {
	fields := []string{"clientConfig", "rules", "timeoutSeconds", "namespaceSelector", "objectSelector", "matchPolicy", "sideEffects", "admissionReviewVersions", "reinvocationPolicy"}
	parts := make([]string, 0, len(fields)+2)
	for _, f := range fields {
		parts = append(parts, fmt.Sprintf("has(o.%s) == has(w.%s) && (!has(o.%s) || o.%s == w.%s)", f, f, f, f, f))
	}
	parts = append(parts,
		"(w.name in variables.managed || (has(o.failurePolicy) == has(w.failurePolicy) && (!has(o.failurePolicy) || o.failurePolicy == w.failurePolicy)))",
		fmt.Sprintf("(has(o.matchConditions) ? o.matchConditions.filter(c, c.name != %s) : []) == (has(w.matchConditions) ? w.matchConditions.filter(c, c.name != %s) : [])", marker, marker))
	return strings.Join(parts, " && ")
}

// celManagedMap renders the managed webhooks as a CEL map literal from
// resource to configuration name to its list of webhook names, sorted as
// the Go rule sorts them.
func celManagedMap(opts Options) string {
	byKind := make([]string, 0, len(kinds))
	for _, kind := range kinds {
		entries := make([]string, 0, len(opts.managed(kind)))
		for _, name := range opts.ConfigNames(kind) {
			entries = append(entries, circuit.QuoteCEL(name)+": "+celList(opts.managedWebhooks(kind, name)))
		}
		byKind = append(byKind, circuit.QuoteCEL(kind.Resource())+": {"+strings.Join(entries, ", ")+"}")
	}
	return "{" + strings.Join(byKind, ", ") + "}"
}

// celList renders values, in their order, as a CEL list literal of strings.
func celList(values []string) string {
	quoted := make([]string, 0, len(values))
	for _, v := range values {
		quoted = append(quoted, circuit.QuoteCEL(v))
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}
