package marking

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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
	return fmt.Sprintf("%s/%s since %s", configuration, webhook, openedAt.UTC().Format("2006-01-02T15:04:05Z"))
}

// Operations are the operations a marking policy marks: CREATE and
// UPDATE, the writes that store an object the webhook would have mutated.
// A mark is left by one of them, on a resource or one of its
// subresources, that the webhook's rules match ("guard unmutated" looks
// for marks where they can be).
func Operations() []admissionregistrationv1.OperationType {
	return []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
}

// LoadedAnnotation is the annotation a marking policy puts on a canary
// (see Canary): its key names the circuit, its value is the policy's
// Digest. Seeing it proves that kube-apiserver evaluates that version
// of the policy and its binding.
func LoadedAnnotation(configuration, webhook string) string {
	return "webhook-guard.io/loaded-" + ID(configuration, webhook)
}

// ArmedAnnotation is the annotation a marking policy puts on a canary,
// with the value "true", while the configuration it reads arms it (an
// entry for its webhook in the record or the arming entries). Seeing it
// proves that kube-apiserver marks what the webhook's circuit lets through
// from now on.
func ArmedAnnotation(configuration, webhook string) string {
	return "webhook-guard.io/armed-" + ID(configuration, webhook)
}

// CanaryLabel marks the dry-run create of a core/v1 Event that
// asks marking policies to answer on it (CanaryEvent). Only dry-run
// creates are answered: nothing answered is ever stored.
const CanaryLabel = "webhook-guard.io/marking-canary"

// CanaryLabelFor, on a canary, asks the marking policy of one circuit to
// answer with its LoadedAnnotation (and ArmedAnnotation while armed). A
// policy answers only the canaries that ask for it: each answer is a
// mutation kube-apiserver applies, and a canary that every one of a
// thousand policies answered cost it a thousand.
func CanaryLabelFor(configuration, webhook string) string {
	return "webhook-guard.io/canary-" + ID(configuration, webhook)
}

// Render returns the marking policy and binding of configuration's
// mutating webhook, as an administrator installs them (guard manifests
// marking). They need nothing from the running service:
//
//   - The binding's param is the MutatingWebhookConfiguration itself
//     (paramKind), so the policy reads the circuit record, and the arming
//     entries (circuit.ArmingAnnotation), from the object the breaker
//     writes. The breaker arms the policy before the write that opens the
//     circuit and disarms it a while after the one that closes it
//     (internal/breaker, arming.go), since kube-apiserver's webhook
//     dispatcher sees a write a moment after the policy does.
//   - The policy matches every CREATE and UPDATE and mirrors the
//     webhook's rules, scope, namespaceSelector and objectSelector in CEL
//     from the param, so it follows the webhook as it is now. It does not
//     mirror the webhook's own matchConditions (CEL cannot evaluate CEL):
//     objects they would have excluded are marked too. Marks are hints.
//   - Its only mutation is the unmutated label and annotation, and on a
//     canary Event the LoadedAnnotation.
//
// The service's token can neither create nor change these objects.
func Render(configuration, webhook string) (*admissionregistrationv1.MutatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
	return render(configuration, webhook, Digest(configuration, webhook))
}

// render is Render with the digest the canary answers with.
func render(configuration, webhook, digest string) (*admissionregistrationv1.MutatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
	name := Name(configuration, webhook)
	meta := metav1.ObjectMeta{
		Name:        name,
		Labels:      Labels(),
		Annotations: map[string]string{circuit.MarksAnnotation: configuration + "/" + webhook},
	}
	failurePolicy := admissionregistrationv1.Ignore
	policy := &admissionregistrationv1.MutatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "MutatingAdmissionPolicy"},
		ObjectMeta: meta,
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			ParamKind: &admissionregistrationv1.ParamKind{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "MutatingWebhookConfiguration"},
			// Defaults written out, so that the installed policy reads
			// back exactly as rendered (Keeper.Check compares them).
			MatchConstraints: &admissionregistrationv1.MatchResources{
				// Both selectors empty: kube-apiserver checks them first,
				// on every request that reaches admission (CONNECTs too,
				// such as the path probe's service proxy GETs), and parses
				// a selector that is not empty each time
				// (BenchmarkPolicyMatch).
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: Operations(),
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}, Scope: ptr.To(admissionregistrationv1.AllScopes)},
				}}},
				// kube-apiserver never sends writes of webhook
				// configurations and admission policies to a webhook
				// (IsExemptAdmissionConfigurationResource), so none is
				// admitted without its mutation; and marking one would
				// change the guard's own writes of the configuration, which
				// its guard policy then refuses (a */* webhook, as policy
				// engines register, matches them).
				//
				// Nor are Leases marked: they are heartbeats, the most
				// frequent writes of a cluster (every kubelet and every
				// leader renews one every few seconds), and every marking
				// policy a write matches costs kube-apiserver its match
				// condition (BenchmarkMatchCondition).
				//
				// Nor are events.k8s.io Events, the guard's own among them
				// (a mass failure's openings write a hundred): Events are
				// never marked, and the canary is a core/v1 Event.
				// matchPolicy Exact keeps this rule from excluding core
				// Events, which kube-apiserver holds equivalent.
				ExcludeResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{admissionregistrationv1.GroupName}, APIVersions: []string{"*"},
						Resources: exemptResources, Scope: ptr.To(admissionregistrationv1.AllScopes)},
				}}, {RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{coordinationv1.GroupName}, APIVersions: []string{"*"},
						Resources: []string{"leases"}, Scope: ptr.To(admissionregistrationv1.AllScopes)},
				}}, {RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{eventsv1.GroupName}, APIVersions: []string{"*"},
						Resources: []string{"events"}, Scope: ptr.To(admissionregistrationv1.AllScopes)},
				}}},
				// The resource rules match every version of every
				// resource, so Exact leaves out nothing but what an
				// exclusion would have left out through an equivalent
				// resource.
				MatchPolicy: ptr.To(admissionregistrationv1.Exact),
			},
			Variables: variables(configuration, webhook),
			// The policy applies only to a canary, or while the record
			// arms it to a request the webhook's rules and objectSelector
			// match; its mutation then checks the namespaceSelector (a
			// matchCondition gets no namespaceObject). So kube-apiserver's
			// count of its applications
			// (apiserver_mutating_admission_policy_check_total) is the
			// marks, plus requests outside the webhook's namespaceSelector
			// that its rules match. While the circuit is closed the
			// record's lookup is all that runs. matchConditions cannot read
			// variables, so they are written out here.
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "circuit-open-or-canary",
				Expression: inline("variables.canary || (!variables.isEvent && variables.open && variables.matches)", variables(configuration, webhook))}},
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType:          admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: mutation(configuration, webhook, digest)},
			}},
			FailurePolicy:      &failurePolicy,
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
		},
	}
	allow := admissionregistrationv1.AllowAction
	binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "MutatingAdmissionPolicyBinding"},
		ObjectMeta: *meta.DeepCopy(),
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName: name,
			// The configuration itself; while it does not exist, there is
			// nothing to mark.
			ParamRef: &admissionregistrationv1.ParamRef{Name: configuration, ParameterNotFoundAction: &allow},
		},
	}
	return policy, binding
}

// exemptResources are the resources kube-apiserver never calls webhooks
// for (k8s.io/apiserver's IsExemptAdmissionConfigurationResource).
var exemptResources = []string{
	"mutatingwebhookconfigurations", "validatingwebhookconfigurations",
	"mutatingadmissionpolicies", "mutatingadmissionpolicybindings",
	"validatingadmissionpolicies", "validatingadmissionpolicybindings",
}

// Digest identifies what Render returns for one circuit: it changes
// whenever a release changes the policy. The canary's LoadedAnnotation
// carries it, so a loaded policy of another version does not count.
//
// It is the SHA-256 of the template's digest (TemplateJSON), a space and
// "<configuration>/<webhook>", 16 hex characters: the policy of a circuit
// is the template with these names put in, so it changes exactly when the
// template or the names do, and the chart computes the same with
// sha256sum.
func Digest(configuration, webhook string) string {
	return digestFor(templateDigest(), configuration, webhook)
}

func digestFor(template, configuration, webhook string) string {
	sum := sha256.Sum256([]byte(template + " " + configuration + "/" + webhook))
	return hex.EncodeToString(sum[:8])
}

// templateDigest digests the template's policy and binding specs, with
// their placeholders.
var templateDigest = sync.OnceValue(func() string {
	return digestOf(render(placeholderConfiguration, placeholderWebhook, placeholderDigest))
})

func digestOf(policy *admissionregistrationv1.MutatingAdmissionPolicy, binding *admissionregistrationv1.MutatingAdmissionPolicyBinding) string {
	data, _ := json.Marshal([]any{policy.Spec, binding.Spec})
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// The placeholders of TemplateJSON. Configuration and webhook names are
// DNS names, so none of them can hold one, and JSON writes them as they
// are.
const (
	placeholderConfiguration = "@CONFIGURATION@"
	placeholderWebhook       = "@WEBHOOK@"
	placeholderID            = "@ID@"
	placeholderDigest        = "@DIGEST@"
	// placeholderWebhookPattern is the webhook's circuit.NamePattern
	// ('.' written [.]), inside the regular expressions that find its
	// entry.
	placeholderWebhookPattern = "@WEBHOOK_PATTERN@"
)

// namePattern is webhook's circuit.NamePattern, and in the template its
// placeholder: the chart writes the name into the pattern with each '.'
// as [.], which it cannot do to a pattern made from @WEBHOOK@.
func namePattern(webhook string) string {
	if webhook == placeholderWebhook {
		return placeholderWebhookPattern
	}
	return circuit.NamePattern(webhook)
}

// markingTemplate is what TemplateJSON holds.
type markingTemplate struct {
	// Digest is the template's own digest, the start of each circuit's
	// Digest.
	Digest string `json:"digest"`
	// Policy and Binding are Render's objects, as JSON objects, with the
	// placeholders @CONFIGURATION@, @WEBHOOK@, @WEBHOOK_PATTERN@ (the
	// webhook's circuit.NamePattern), @ID@ (the circuit's ID) and
	// @DIGEST@ (its Digest) where the circuit's values go.
	Policy  map[string]any `json:"policy"`
	Binding map[string]any `json:"binding"`
}

// TemplateJSON is the marking policy and binding of every circuit, with
// placeholders for what differs between circuits (see markingTemplate): what the
// Helm chart renders the marking policies of its targets from
// (files/marking.json), with no "guard manifests marking" step. A circuit's
// objects are TemplateJSON with each placeholder replaced by its value,
// which makes them equal to Render's (TestTemplateJSON_filledIsRender).
func TemplateJSON() ([]byte, error) {
	policy, binding := render(placeholderConfiguration, placeholderWebhook, placeholderDigest)
	t := markingTemplate{Digest: templateDigest()}
	var err error
	if t.Policy, err = circuit.ObjectJSON(policy); err != nil {
		return nil, err
	}
	if t.Binding, err = circuit.ObjectJSON(binding); err != nil {
		return nil, err
	}
	data, err := circuit.IndentJSON(t)
	if err != nil {
		return nil, err
	}
	// The placeholders' own ID stands for the circuit's.
	id := ID(placeholderConfiguration, placeholderWebhook)
	return []byte(strings.ReplaceAll(string(data), id, placeholderID)), nil
}

// mutation is the policy's mutation: on a canary, the
// LoadedAnnotation with digest, and the ArmedAnnotation while the policy
// is armed; otherwise the unmutated label (the
// circuit's ID) and annotation ("<configuration>/<webhook> since
// <openedAt>", openedAt read from the record entry).
func mutation(configuration, webhook, digest string) string {
	note := circuit.QuoteCEL(configuration+"/"+webhook+" since ") + " + " + circuit.FactOpenedAt.ShowCEL("variables.entry")
	loaded := circuit.QuoteCEL(LoadedAnnotation(configuration, webhook)) + ": " + circuit.QuoteCEL(digest)
	return "variables.canary\n" +
		"? Object{metadata: Object.metadata{annotations: variables.open\n" +
		"    ? {" + loaded + ", " + circuit.QuoteCEL(ArmedAnnotation(configuration, webhook)) + ": 'true'}\n" +
		"    : {" + loaded + "}}}\n" +
		": !variables.inNamespace ? Object{}\n" +
		": Object{metadata: Object.metadata{\n" +
		"    labels: {" + circuit.QuoteCEL(circuit.UnmutatedLabel) + ": " + circuit.QuoteCEL(ID(configuration, webhook)) + "},\n" +
		"    annotations: {" + circuit.QuoteCEL(circuit.UnmutatedAnnotation) + ": " + note + "}}}"
}

// variableRef is a reference to a CEL variable.
var variableRef = regexp.MustCompile(`variables\.([A-Za-z]+)`)

// inline writes every variable expr refers to out, in parentheses,
// recursively: an expression that cannot read variables (a matchCondition)
// reads the same thing.
func inline(expr string, vars []admissionregistrationv1.Variable) string {
	byName := map[string]string{}
	for _, v := range vars {
		byName[v.Name] = v.Expression
	}
	var expand func(string) string
	expand = func(e string) string {
		return variableRef.ReplaceAllStringFunc(e, func(ref string) string {
			return "(" + expand(byName[variableRef.FindStringSubmatch(ref)[1]]) + ")"
		})
	}
	return expand(expr)
}

// variables are the policy's CEL variables. request, object, oldObject,
// namespaceObject and params are kube-apiserver's; every field that may
// be absent is tested with has() first.
func variables(configuration, webhook string) []admissionregistrationv1.Variable {
	v := func(name, expression string) admissionregistrationv1.Variable {
		return admissionregistrationv1.Variable{Name: name, Expression: expression}
	}
	return []admissionregistrationv1.Variable{
		// The canary: the service's evidence that this policy is
		// loaded. Never stored.
		v("canary", canaryExpr(configuration, webhook)),
		// Events are not marked, only answered as canaries: they record,
		// they configure nothing (policy engines leave them out too:
		// Kyverno's default resourceFilters begin with [Event,*,*]), and
		// there are many of them. A core/v1 Event costs each policy only
		// these comparisons; events.k8s.io Events, the guard's own
		// among them, never get here (they are outside matchConstraints),
		// but this holds without that.
		v("isEvent", `request.resource.resource == 'events' && (request.resource.group == '' || request.resource.group == 'events.k8s.io')`),
		// The circuit record on the configuration, '' when there is none.
		v("record", annotationExpr(circuit.Annotation)),
		// The entries that arm marking around a transition (see
		// circuit.ArmingAnnotation), '' when there are none.
		v("arming", annotationExpr(circuit.ArmingAnnotation)),
		// The webhook's entry for this configuration: in the record while
		// its circuit is open, else in the arming entries around a
		// transition; '' otherwise. An entry with another UID is a copy
		// carried to a configuration re-created under the same name.
		v("entry", entryExpr(webhook)),
		// Open: the webhook has an entry, so the policy is armed.
		v("open", `variables.entry != ''`),
		v("webhook", `has(params.webhooks) ? params.webhooks.filter(w, w.name == `+circuit.QuoteCEL(webhook)+`) : []`),
		v("subresource", `has(request.subResource) ? request.subResource : ''`),
		v("requestNamespace", `has(request.namespace) ? request.namespace : ''`),
		v("isNamespace", `request.resource.group == '' && request.resource.version == 'v1' && request.resource.resource == 'namespaces'`),
		v("objectLabels", `object != null && has(object.metadata.labels) ? object.metadata.labels : {}`),
		v("oldObjectLabels", `oldObject != null && has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}`),
		v("namespaceLabels", `variables.isNamespace ? variables.objectLabels :
namespaceObject != null && has(namespaceObject.metadata.labels) ? namespaceObject.metadata.labels : {}`),
		// The webhook's other match criteria as kube-apiserver applies
		// them (k8s.io/apiserver admission/plugin/webhook/predicates):
		// rules, scope and objectSelector (the new or the old object). With matchPolicy Equivalent (the default) any version
		// of the group and resource matches.
		// In the webhook's namespaceSelector (skipped for cluster-scoped
		// objects other than namespaces). Only the mutation reads it:
		// kube-apiserver gives matchConditions no namespaceObject.
		v("inNamespace", `variables.webhook.exists(w, !has(w.namespaceSelector) || (!variables.isNamespace && variables.requestNamespace == '') ||
    `+selects("w.namespaceSelector", "variables.namespaceLabels")+`)`),
		v("matches", `variables.webhook.exists(w,
  has(w.rules) && w.rules.exists(r,
    has(r.operations) && r.operations.exists(o, o == '*' || o == request.operation) &&
    has(r.apiGroups) && r.apiGroups.exists(g, g == '*' || g == request.resource.group) &&
    ((has(w.matchPolicy) && w.matchPolicy == 'Exact')
      ? (has(r.apiVersions) && r.apiVersions.exists(v, v == '*' || v == request.resource.version))
      : true) &&
    has(r.resources) && r.resources.exists(x,
      (x.split('/')[0] == '*' || x.split('/')[0] == request.resource.resource) &&
      (size(x.split('/')) == 1 ? variables.subresource == '' : (x.split('/')[1] == '*' || x.split('/')[1] == variables.subresource))) &&
    (!has(r.scope) || r.scope == '*' ||
      (r.scope == 'Namespaced' && !variables.isNamespace && variables.requestNamespace != '') ||
      (r.scope == 'Cluster' && (variables.isNamespace || variables.requestNamespace == '')))) &&
  (!has(w.objectSelector) || `+selects("w.objectSelector", "variables.objectLabels")+` ||
    (oldObject != null && `+selects("w.objectSelector", "variables.oldObjectLabels")+`)))`),
	}
}

// canaryExpr is true on a canary that asks for this circuit: the dry-run
// create of a core/v1 Event labelled CanaryLabelFor it.
func canaryExpr(configuration, webhook string) string {
	return `request.resource.group == '' && request.resource.resource == 'events' &&
has(request.dryRun) && request.dryRun && has(object.metadata.labels) && ` + circuit.QuoteCEL(CanaryLabelFor(configuration, webhook)) + ` in object.metadata.labels`
}

// annotationExpr is the configuration's (the param's) annotation key, the
// empty string when there is none.
func annotationExpr(key string) string {
	return `(has(params.metadata.annotations) && ` + circuit.QuoteCEL(key) + ` in params.metadata.annotations
? params.metadata.annotations[` + circuit.QuoteCEL(key) + `] : '')`
}

// entryExpr is webhook's entry with the configuration's UID in the record,
// or else in the arming entries; the empty string when neither holds one.
func entryExpr(webhook string) string {
	inRecord := circuit.EntryTextOfCEL("variables.record", namePattern(webhook))
	inArming := circuit.EntryTextOfCEL("variables.arming", namePattern(webhook))
	uid := func(entry string) string { return circuit.FactUID.CEL(entry) + " == string(params.metadata.uid)" }
	// A plain substring test first: while the circuit is closed, which
	// is nearly always, the regular expressions do not run.
	key := circuit.QuoteCEL(circuit.EntryKey(webhook))
	return "(variables.record.contains(" + key + ") || variables.arming.contains(" + key + "))\n? ([" + inRecord + ",\n  " + inArming + "].filter(e, e != '' && " + uid("e") + ") + [''])[0]\n: ''"
}

// selects is a CEL expression: the label selector (a CEL expression of a
// metav1.LabelSelector) selects labels (a CEL map), as
// metav1.LabelSelectorAsSelector would.
func selects(selector, labels string) string {
	return strings.NewReplacer("$S", selector, "$L", labels).Replace(`((!has($S.matchLabels) || $S.matchLabels.all(k, k in $L && $L[k] == $S.matchLabels[k])) &&
    (!has($S.matchExpressions) || $S.matchExpressions.all(e,
      e.operator == 'In' ? (e.key in $L && has(e.values) && e.values.exists(x, x == $L[e.key])) :
      e.operator == 'NotIn' ? (!(e.key in $L) || !has(e.values) || !e.values.exists(x, x == $L[e.key])) :
      e.operator == 'Exists' ? e.key in $L :
      e.operator == 'DoesNotExist' ? !(e.key in $L) : false)))`)
}
