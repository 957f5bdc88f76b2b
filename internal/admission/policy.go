package admission

import (
	"fmt"
	"sort"
	"strings"
	"unicode"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PolicyName is the name of the ValidatingAdmissionPolicy and of its binding.
const PolicyName = "webhook-guard"

// noManagedConfigurationName is the only resourceName of a policy rendered
// with no managed configuration. It contains ':', which a
// MutatingWebhookConfiguration name (a DNS subdomain) cannot, so the policy
// matches nothing; an empty resourceNames list would match every
// configuration instead.
const noManagedConfigurationName = "webhook-guard:no-managed-configurations"

const (
	mwcGroup    = "admissionregistration.k8s.io"
	mwcVersion  = "v1"
	mwcResource = "mutatingwebhookconfigurations"
)

// Labels returns the labels put on every object this package renders.
func Labels() map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":       "webhook-guard",
		"app.kubernetes.io/managed-by": "webhook-guard",
	}
}

// RenderPolicy renders the ownership rule as a ValidatingAdmissionPolicy named
// PolicyName and its binding (validationActions Deny). kube-apiserver
// evaluates it in-process, so it holds even while webhook-guard is down.
//
// The policy matches CREATE and UPDATE of the managed configurations by name.
// With no managed configuration it matches a name no configuration can have,
// never every configuration. Both objects carry TypeMeta and Labels.
func RenderPolicy(opts Options) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	names := opts.ConfigNames()
	if len(names) == 0 {
		names = []string{noManagedConfigurationName}
	}
	failurePolicy := admissionregistrationv1.Fail
	matchPolicy := admissionregistrationv1.Equivalent
	scope := admissionregistrationv1.ClusterScope

	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta: metav1.TypeMeta{
			APIVersion: admissionregistrationv1.SchemeGroupVersion.String(),
			Kind:       "ValidatingAdmissionPolicy",
		},
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName, Labels: Labels()},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &failurePolicy,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
				MatchPolicy:       &matchPolicy,
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					ResourceNames: names,
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						Rule: admissionregistrationv1.Rule{
							APIGroups:   []string{mwcGroup},
							APIVersions: []string{mwcVersion},
							Resources:   []string{mwcResource},
							Scope:       &scope,
						},
					},
				}},
			},
			Variables: policyVariables(opts),
			Validations: []admissionregistrationv1.Validation{{
				Expression:        validationExpression,
				MessageExpression: messageExpression(opts),
				Message: fmt.Sprintf("fields owned by webhook-guard (%s) may not be changed; to hand the configuration over, run: %s",
					opts.Breaker(), AnnotateCommand("<name>", false)),
				Reason: ptrTo(metav1.StatusReasonForbidden),
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta: metav1.TypeMeta{
			APIVersion: admissionregistrationv1.SchemeGroupVersion.String(),
			Kind:       "ValidatingAdmissionPolicyBinding",
		},
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName, Labels: Labels()},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        PolicyName,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return policy, binding
}

func ptrTo[T any](v T) *T { return &v }

// validationExpression admits the request unless it changes owned fields of
// a managed configuration without being the breaker or carrying an override.
const validationExpression = `!variables.isManaged || variables.isBreaker || variables.override || size(variables.ownedChanges) == 0`

// policyVariables renders the policy's variables; each may use the ones
// before it.
func policyVariables(opts Options) []admissionregistrationv1.Variable {
	marker := celQuote(BypassMatchConditionName)
	circuit := celQuote(CircuitAnnotation)
	override := celQuote(OverrideAnnotation)
	markersOf := func(list string) string {
		return fmt.Sprintf(`%s.filter(w, has(w.matchConditions) && w.matchConditions.exists(c, c.name == %s)).map(w, w.name + ' ' + w.matchConditions.filter(c, c.name == %s)[0].expression)`,
			list, marker, marker)
	}
	vars := []struct{ name, expr string }{
		// managed webhook names by configuration name, rendered from Options.
		{"managedByConfig", celManagedMap(opts.Managed)},
		{"isManaged", `object.metadata.name in variables.managedByConfig`},
		{"managed", `variables.isManaged ? variables.managedByConfig[object.metadata.name] : []`},
		{"isBreaker", `request.userInfo.username == ` + celQuote(opts.Breaker())},
		{"annotations", `has(object.metadata.annotations) ? object.metadata.annotations : {}`},
		{"oldAnnotations", `oldObject != null && has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}`},
		{"override", fmt.Sprintf(`%s in variables.annotations && variables.annotations[%s] != ''`, override, override)},
		{"newWebhooks", `has(object.webhooks) ? object.webhooks : []`},
		{"oldWebhooks", `oldObject != null && has(oldObject.webhooks) ? oldObject.webhooks : []`},
		// managed webhooks, present on both sides, whose failurePolicy differs (unset is '').
		{"failurePolicyChanged", `variables.oldWebhooks.filter(o, o.name in variables.managed && variables.newWebhooks.exists(w, w.name == o.name && (has(w.failurePolicy) ? w.failurePolicy : '') != (has(o.failurePolicy) ? o.failurePolicy : ''))).map(o, o.name)`},
		// "<webhook name> <expression>" of each bypass marker; names contain no space.
		{"newMarkers", markersOf("variables.newWebhooks")},
		{"oldMarkers", markersOf("variables.oldWebhooks")},
		// webhooks (new ones, then removed ones) whose bypass marker was added, removed or altered.
		{"bypassChanged", `(variables.newWebhooks.map(w, w.name) + variables.oldWebhooks.filter(o, !variables.newWebhooks.exists(w, w.name == o.name)).map(o, o.name)).filter(n, variables.newMarkers.filter(m, m.startsWith(n + ' ')) != variables.oldMarkers.filter(m, m.startsWith(n + ' ')))`},
		// the circuit record as a list of zero or one value.
		{"circuit", fmt.Sprintf(`%s in variables.annotations ? [variables.annotations[%s]] : []`, circuit, circuit)},
		{"oldCircuit", fmt.Sprintf(`%s in variables.oldAnnotations ? [variables.oldAnnotations[%s]] : []`, circuit, circuit)},
		// the stored record for the message: one line (the apiserver drops a
		// multi-line message) and at most 1024 characters (it drops one over 5 KiB).
		{"oldCircuitText", `size(variables.oldCircuit) == 0 ? '' : (size(variables.oldCircuit[0]) > 1024 ? variables.oldCircuit[0].substring(0, 1024) + '...' : variables.oldCircuit[0]).replace('\n', ' ').replace('\r', ' ')`},
		// For each changed managed webhook with an entry in the stored record:
		// "since when and the original value", read with regular expressions
		// because CEL cannot parse JSON. Names are DNS subdomains, so '.' is
		// the only character to escape.
		{"openNotes", `size(variables.oldCircuit) == 0 ? [] : (variables.failurePolicyChanged + variables.bypassChanged.filter(n, !(n in variables.failurePolicyChanged))).filter(n, n in variables.managed && variables.oldCircuit[0].matches('"' + n.replace('.', '\\.') + '":\\{')).map(n, 'webhooks[name=' + n + ']: circuit open since ' + variables.oldCircuit[0].find('"' + n.replace('.', '\\.') + '":\\{[^}]*\\}').find('"openedAt":"[^"]*"').replace('"openedAt":', '').replace('"', '') + ', original failurePolicy ' + variables.oldCircuit[0].find('"' + n.replace('.', '\\.') + '":\\{[^}]*\\}').find('"originalFailurePolicy":("[^"]*"|null)').replace('"originalFailurePolicy":', '').replace('"', '').replace('null', 'unset'))`},
		{"ownedChanges", fmt.Sprintf(`variables.failurePolicyChanged.map(n, 'webhooks[name=' + n + '].failurePolicy') + variables.bypassChanged.map(n, 'webhooks[name=' + n + '].matchConditions[name=' + %s + ']') + (variables.circuit != variables.oldCircuit ? [%s] : [])`,
			marker, celQuote("metadata.annotations["+CircuitAnnotation+"]"))},
	}
	out := make([]admissionregistrationv1.Variable, 0, len(vars))
	for _, v := range vars {
		out = append(out, admissionregistrationv1.Variable{Name: v.name, Expression: v.expr})
	}
	return out
}

// messageExpression renders the denial message: the same key facts as the Go
// message (configuration, fields, owner, since when the circuit is open and
// the original policy, the stored record, and the kubectl command).
func messageExpression(opts Options) string {
	return strings.Join([]string{
		`'mutatingwebhookconfiguration "' + object.metadata.name + '": user "' + request.userInfo.username + '" may not change fields owned by webhook-guard (' + ` + celQuote(opts.Breaker()) + ` + '): ' + variables.ownedChanges.join(', ') + '.'`,
		`(size(variables.openNotes) > 0 ? ' ' + variables.openNotes.join('; ') + '.' : '')`,
		`(size(variables.oldCircuit) > 0 ? ' Circuit record (` + CircuitAnnotation + `): ' + variables.oldCircuitText + '.' : '')`,
		`' To hand this configuration over, run: kubectl annotate mutatingwebhookconfiguration ' + object.metadata.name + ' ` + OverrideAnnotation + `="<reason>"'`,
		`(` + celQuote(OverrideAnnotation) + ` in variables.oldAnnotations ? ' --overwrite' : '')`,
		`' and retry; remove the annotation to give it back to webhook-guard.'`,
	}, " + ")
}

// celManagedMap renders managed as a CEL map literal from configuration name
// to the list of managed webhook names, with sorted keys and values.
func celManagedMap(managed map[string][]string) string {
	keys := make([]string, 0, len(managed))
	for k := range managed {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	entries := make([]string, 0, len(keys))
	for _, k := range keys {
		entries = append(entries, celQuote(k)+": "+celList(managed[k]))
	}
	return "{" + strings.Join(entries, ", ") + "}"
}

// celList renders values, sorted and deduplicated, as a CEL list literal of
// strings.
func celList(values []string) string {
	sorted := append([]string(nil), values...)
	sort.Strings(sorted)
	items := make([]string, 0, len(sorted))
	for i, v := range sorted {
		if i > 0 && sorted[i-1] == v {
			continue
		}
		items = append(items, celQuote(v))
	}
	return "[" + strings.Join(items, ", ") + "]"
}

// celQuote returns s as a single-quoted CEL string literal. Backslashes and
// single quotes are escaped, common control characters use their short
// escapes, and any other non-printable rune is written as \uXXXX or
// \UXXXXXXXX; invalid UTF-8 becomes U+FFFD.
func celQuote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for _, r := range s {
		switch r {
		case '\\':
			b.WriteString(`\\`)
		case '\'':
			b.WriteString(`\'`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			switch {
			case unicode.IsPrint(r):
				b.WriteRune(r)
			case r <= 0xFFFF:
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		}
	}
	b.WriteByte('\'')
	return b.String()
}
