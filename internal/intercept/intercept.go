package intercept

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/marking"
	"github.com/webhook-guard/webhook-guard/internal/rulematch"
)

// What names one kind of the guard's own requests.
type What string

const (
	// Lease is the create and update of the guard's leader-election Lease
	// (coordination.k8s.io/v1 leases) in its namespace.
	Lease What = "Lease"
	// Events are the create and update (a patch is an UPDATE to admission)
	// of the Events the guard records, core v1 and events.k8s.io/v1: in
	// circuit.EventsNamespace (kube-system) for cluster-scoped objects (the
	// webhook configurations, the guard's policy), in the Lease's
	// namespace for its Lease (leader election's own Events).
	Events What = "Events"
	// Canary is the marking canary (marking.CanaryEvent): a dry-run create
	// of a core/v1 Event labelled marking.CanaryLabel in
	// marking.CanaryNamespace, sent before a mutating circuit opens.
	Canary What = "canary"
)

// Request is one of the guard's own requests: what, and in which
// namespace.
type Request struct {
	What      What   `json:"what"`
	Namespace string `json:"namespace"`
}

// String says it as the output does: "Lease in webhook-guard", "Events
// in default", "marking canary in default".
func (r Request) String() string {
	if r.What == Canary {
		return "marking canary in " + r.Namespace
	}
	return string(r.What) + " in " + r.Namespace
}

// Inputs are what Find reads. Namespace is required; every other field
// has a usable zero value.
type Inputs struct {
	// Namespace is where the guard's leader-election Lease is, and where
	// leader election records its Events (--leader-election-namespace:
	// kube-system in the shipped manifests).
	Namespace string
	// NamespaceLabels are Namespace's labels. Default (nil): only
	// kubernetes.io/metadata.name, which kube-apiserver sets on every
	// namespace and is always added here. That label is what policy
	// engines' selectors exclude namespaces by; a selector on any other
	// label is then judged as if the namespace did not carry it.
	NamespaceLabels map[string]string
	// DefaultLabels are the labels of namespace default, where the marking
	// canary goes. Default (nil): only kubernetes.io/metadata.name, as for
	// NamespaceLabels.
	DefaultLabels map[string]string
	// EventsLabels are the labels of circuit.EventsNamespace, where the
	// guard's Events about cluster-scoped objects go, when it is not
	// Namespace. Default (nil): only kubernetes.io/metadata.name.
	EventsLabels map[string]string
	// WithoutLeaderElection leaves the Lease out: the guard runs without
	// leader election. Default false.
	WithoutLeaderElection bool
	// WithoutMarking leaves the canary out: no mutating target can open,
	// or the apiserver does not serve MutatingAdmissionPolicy. Default
	// false.
	WithoutMarking bool
	// Mutating and Validating are the cluster's webhook configurations.
	Mutating   []admissionregistrationv1.MutatingWebhookConfiguration
	Validating []admissionregistrationv1.ValidatingWebhookConfiguration
}

// Interceptor is a webhook with failurePolicy Fail that intercepts some of
// the guard's own requests.
type Interceptor struct {
	Kind          circuit.Kind `json:"kind"`
	Configuration string       `json:"configuration"`
	Webhook       string       `json:"webhook"`
	// TimeoutSeconds is its timeout (the API's default, 10, when unset):
	// how long each intercepted request waits when it hangs.
	TimeoutSeconds int32 `json:"timeoutSeconds"`
	// Intercepts are the requests it intercepts, in the order Lease,
	// Events (the guard's namespace, then default), canary.
	Intercepts []Request `json:"intercepts"`
	// MatchConditions is true when the webhook has matchConditions: CEL on
	// the request, not evaluated here. It intercepts those of Intercepts
	// that its conditions let through: it may intercept them.
	MatchConditions bool `json:"matchConditions,omitempty"`
	// CircuitOpen is true when the guard holds its circuit open: it is
	// judged as it will be again when the circuit closes, by its original
	// failurePolicy and without the bypass marker.
	CircuitOpen bool `json:"circuitOpen,omitempty"`
}

// Namespaces are the namespaces of i.Intercepts, each once, in order: the
// ones to exclude in its namespaceSelector.
func (i Interceptor) Namespaces() []string {
	var out []string
	for _, r := range i.Intercepts {
		if !slices.Contains(out, r.Namespace) {
			out = append(out, r.Namespace)
		}
	}
	return out
}

// InterceptsAny reports whether i intercepts w in any namespace.
func (i Interceptor) InterceptsAny(w What) bool {
	return slices.ContainsFunc(i.Intercepts, func(r Request) bool { return r.What == w })
}

// The resources of the guard's requests.
var (
	leases      = coordinationv1.SchemeGroupVersion.WithResource("leases")
	coreEvents  = corev1.SchemeGroupVersion.WithResource("events")
	eventEvents = eventsv1.SchemeGroupVersion.WithResource("events")
)

// equivalents are the resources that matchPolicy Equivalent (the default)
// treats as the resource requested, as kube-apiserver's
// EquivalentResourceRegistry does: it stores Events once and serves them
// as core v1 events and events.k8s.io/v1 events (cohabitating resources),
// so a rule on either intercepts both. Leases are served in one version.
var equivalents = map[schema.GroupVersionResource][]schema.GroupVersionResource{
	coreEvents:  {eventEvents},
	eventEvents: {coreEvents},
}

// request is one of the guard's requests as admission sees it.
type request struct {
	Request
	resource   schema.GroupVersionResource
	operations []admission.Operation
	// labels are the object's: none, except on the canary.
	labels map[string]string
}

// requests lists the guard's own requests for in.
func requests(in Inputs) []request {
	writes := []admission.Operation{admission.Create, admission.Update}
	var out []request
	if !in.WithoutLeaderElection {
		out = append(out, request{Request: Request{What: Lease, Namespace: in.Namespace}, resource: leases, operations: writes})
	}
	for _, ns := range slices.Compact([]string{in.Namespace, circuit.EventsNamespace}) {
		for _, res := range []schema.GroupVersionResource{coreEvents, eventEvents} {
			out = append(out, request{Request: Request{What: Events, Namespace: ns}, resource: res, operations: writes})
		}
	}
	if !in.WithoutMarking {
		canary := marking.CanaryEvent()
		out = append(out, request{Request: Request{What: Canary, Namespace: marking.CanaryNamespace}, resource: coreEvents,
			operations: []admission.Operation{admission.Create}, labels: canary.Labels})
	}
	return out
}

// hook is a webhook of either kind, with what matching reads.
type hook struct {
	kind                            circuit.Kind
	configuration, name             string
	annotations                     map[string]string
	uid                             types.UID
	failurePolicy                   *admissionregistrationv1.FailurePolicyType
	matchPolicy                     *admissionregistrationv1.MatchPolicyType
	namespaceSelector, objectSelect *metav1.LabelSelector
	rules                           []admissionregistrationv1.RuleWithOperations
	matchConditions                 []admissionregistrationv1.MatchCondition
	timeoutSeconds                  *int32
}

// Find returns every webhook of in's configurations with failurePolicy
// Fail (the default when unset) that intercepts one of the guard's own
// requests, as kube-apiserver matches them: its rules (with the
// equivalent resources of matchPolicy Equivalent, the default), its
// namespaceSelector against the namespace's labels, and its
// objectSelector against the object's (the Lease and the Events carry
// none; the canary carries marking.CanaryLabel). A selector that does not
// parse intercepts: kube-apiserver rejects the request. A matchCondition
// whose expression is "false" excludes every request; any other makes the
// webhook one that may intercept (Interceptor.MatchConditions). Webhooks
// the guard manages are judged like any other. The result is sorted by
// kind, configuration and webhook.
func Find(in Inputs) []Interceptor {
	nsLabels := map[string]labels.Set{
		metav1.NamespaceDefault: withName(in.DefaultLabels, metav1.NamespaceDefault),
		circuit.EventsNamespace: withName(in.EventsLabels, circuit.EventsNamespace),
	}
	if (in.Namespace != metav1.NamespaceDefault && in.Namespace != circuit.EventsNamespace) || in.NamespaceLabels != nil {
		nsLabels[in.Namespace] = withName(in.NamespaceLabels, in.Namespace)
	}
	reqs := requests(in)
	var out []Interceptor
	for _, h := range hooks(in) {
		if i, ok := judge(h, reqs, nsLabels); ok {
			out = append(out, i)
		}
	}
	slices.SortFunc(out, func(a, b Interceptor) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Configuration, b.Configuration), cmp.Compare(a.Webhook, b.Webhook))
	})
	return out
}

// withName is labels with kubernetes.io/metadata.name set to name, as
// kube-apiserver sets it on every namespace.
func withName(l map[string]string, name string) labels.Set {
	out := labels.Set(maps.Clone(l))
	if out == nil {
		out = labels.Set{}
	}
	out[corev1.LabelMetadataName] = name
	return out
}

func hooks(in Inputs) []hook {
	var out []hook
	for _, c := range in.Mutating {
		for _, w := range c.Webhooks {
			out = append(out, hook{kind: circuit.KindMutating, configuration: c.Name, name: w.Name, annotations: c.Annotations, uid: c.UID,
				failurePolicy: w.FailurePolicy, matchPolicy: w.MatchPolicy, namespaceSelector: w.NamespaceSelector, objectSelect: w.ObjectSelector,
				rules: w.Rules, matchConditions: w.MatchConditions, timeoutSeconds: w.TimeoutSeconds})
		}
	}
	for _, c := range in.Validating {
		for _, w := range c.Webhooks {
			out = append(out, hook{kind: circuit.KindValidating, configuration: c.Name, name: w.Name, annotations: c.Annotations, uid: c.UID,
				failurePolicy: w.FailurePolicy, matchPolicy: w.MatchPolicy, namespaceSelector: w.NamespaceSelector, objectSelect: w.ObjectSelector,
				rules: w.Rules, matchConditions: w.MatchConditions, timeoutSeconds: w.TimeoutSeconds})
		}
	}
	return out
}

// judge says whether h intercepts any of reqs, and which.
func judge(h hook, reqs []request, nsLabels map[string]labels.Set) (Interceptor, bool) {
	i := Interceptor{Kind: h.kind, Configuration: h.configuration, Webhook: h.name, TimeoutSeconds: 10}
	if h.timeoutSeconds != nil {
		i.TimeoutSeconds = *h.timeoutSeconds
	}
	policy := h.failurePolicy
	conditions := h.matchConditions
	// While the guard holds the circuit open, judge the webhook as it is
	// when closed: its original failurePolicy, without the bypass marker.
	if rec, err := circuit.Decode(h.annotations); err == nil {
		if e, ok := rec[h.name]; ok && e.UID == h.uid {
			i.CircuitOpen = true
			policy = e.OriginalFailurePolicy
			conditions = slices.DeleteFunc(slices.Clone(conditions), func(mc admissionregistrationv1.MatchCondition) bool {
				return mc.Name == circuit.BypassCondition
			})
		}
	}
	if policy != nil && *policy != admissionregistrationv1.Fail {
		return Interceptor{}, false
	}
	for _, mc := range conditions {
		if strings.TrimSpace(mc.Expression) == "false" {
			return Interceptor{}, false
		}
	}
	i.MatchConditions = len(conditions) > 0
	for _, r := range reqs {
		if slices.Contains(i.Intercepts, r.Request) {
			continue // the other group of the same Events
		}
		if calls(h, r, nsLabels[r.Namespace]) {
			i.Intercepts = append(i.Intercepts, r.Request)
		}
	}
	return i, len(i.Intercepts) > 0
}

// calls reports whether kube-apiserver calls h for r, in the order of its
// webhook dispatcher (generic.Webhook.ShouldCallHook): namespaceSelector,
// objectSelector, rules, then the rules on equivalent resources.
func calls(h hook, r request, nsLabels labels.Set) bool {
	if !selects(h.namespaceSelector, nsLabels) || !selects(h.objectSelect, r.labels) {
		return false
	}
	equivalent := h.matchPolicy == nil || *h.matchPolicy == admissionregistrationv1.Equivalent
	for _, op := range r.operations {
		resources := []schema.GroupVersionResource{r.resource}
		if equivalent {
			resources = append(resources, equivalents[r.resource]...)
		}
		for _, res := range resources {
			if rulematch.Any(h.rules, rulematch.Request{Operation: op, Resource: res, Namespaced: r.Namespace != ""}) {
				return true
			}
		}
	}
	return false
}

// selects evaluates a webhook's namespaceSelector or objectSelector: unset
// or empty selects everything (the API's default is {}), and one that does
// not parse selects too (kube-apiserver then rejects the request).
func selects(s *metav1.LabelSelector, l map[string]string) bool {
	if s == nil {
		return true
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return true
	}
	return sel.Matches(labels.Set(l))
}

// lostWhat names what the guard loses with its Events, or its canary, or
// both, intercepted.
func lostWhat(events, canary bool) string {
	switch {
	case events && canary:
		return "those Events and the marking confirmation"
	case canary:
		return "the marking confirmation"
	}
	return "those Events"
}

// NotInExpression is the namespaceSelector expression that excludes
// namespaces, as YAML on one line.
func NotInExpression(namespaces []string) string {
	return fmt.Sprintf("{key: %s, operator: NotIn, values: [%s]}", corev1.LabelMetadataName, strings.Join(namespaces, ", "))
}

// Advice says what i costs the guard while it fails and how to fix it,
// one sentence each, for the guard whose Lease is in namespace: exclude
// the namespaces with NotInExpression. Excluding default exempts every
// request there from the webhook, so it is offered with what the guard
// loses without it: the marking canary can only be sent in default.
func Advice(i Interceptor, namespace string) []string {
	var out []string
	if i.InterceptsAny(Lease) {
		out = append(out, "while it fails, the guard's leader cannot renew its Lease: it steps down after the renew deadline (--leader-election-renew-deadline) and no replica can take the Lease until the webhook answers again; meanwhile no circuit opens or closes")
	}
	// What it intercepts beyond a Lease.
	var lost []string
	for _, r := range i.Intercepts {
		if r.What == Events {
			lost = append(lost, "Events in "+r.Namespace)
		}
	}
	events := len(lost) > 0
	if i.InterceptsAny(Canary) {
		lost = append(lost, "marking canary (sent before a mutating circuit opens)")
	}
	if len(lost) > 0 {
		out = append(out, fmt.Sprintf("while it fails, the guard's %s fail (each after up to %ds): the guard loses %s, and still opens circuits, because kube-apiserver never sends writes to webhook configurations to webhooks",
			strings.Join(lost, " and "), i.TimeoutSeconds, lostWhat(events, i.InterceptsAny(Canary))))
	}
	if others := slices.DeleteFunc(i.Namespaces(), func(ns string) bool { return ns == metav1.NamespaceDefault }); len(others) > 0 {
		out = append(out, fmt.Sprintf("fix: add %s to its namespaceSelector.matchExpressions (or %s to its existing NotIn on %s)",
			NotInExpression(others), strings.Join(others, ", "), corev1.LabelMetadataName))
	}
	switch {
	case namespace == metav1.NamespaceDefault && slices.Contains(i.Namespaces(), metav1.NamespaceDefault):
		out = append(out, fmt.Sprintf("the guard's Lease is in default: only adding default (%s) protects it, and that exempts every request in default from this webhook; kube-system, as shipped, lets the Lease be protected alone",
			NotInExpression(i.Namespaces())))
	case i.InterceptsAny(Canary):
		out = append(out, fmt.Sprintf("the marking canary can only be sent in default: only adding default as well (%s) protects it, and that exempts every request in default from this webhook",
			NotInExpression(i.Namespaces())))
	}
	if i.MatchConditions {
		out = append(out, "it has matchConditions, not evaluated here: it intercepts these requests only if its conditions let them through")
	}
	if i.CircuitOpen {
		out = append(out, "its circuit is open now: judged by its original failurePolicy, as it will be when the circuit closes")
	}
	return out
}
