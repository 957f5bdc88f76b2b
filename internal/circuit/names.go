package circuit

import "time"

// The names webhook-guard puts on webhook configurations. They are the
// contract with users: keep them stable.
const (
	// Annotation holds the Record on the webhook configuration itself.
	Annotation = "webhook-guard.io/circuit"
	// ArmingAnnotation holds the entries of circuits whose marking is
	// armed while their changes are not in place: an opening's entry
	// written before the write that opens it, and a closed circuit's
	// entry for a grace period after the write that closes it. Its value
	// is encoded as a Record. It only arms the marking policies: the
	// breaker's changes are the Record's alone.
	ArmingAnnotation = "webhook-guard.io/marking-armed"
	// OverrideAnnotation, with a non-empty reason as its value, hands a
	// configuration to its administrators: anyone may then change the owned
	// fields, and the breaker lets go of it.
	OverrideAnnotation = "webhook-guard.io/override"
	// BypassCondition names the matchCondition the breaker adds in Bypass
	// mode.
	BypassCondition = "webhook-guard.io/circuit-open"
	// BypassExpression is the bypass matchCondition's CEL expression: it
	// never matches, so the apiserver skips the webhook.
	BypassExpression = "false"
	// FieldManager is the field manager of every write the service makes.
	FieldManager = "webhook-guard"
	// ReportingController is the reportingController of every Event the
	// service records (reportingComponent in core/v1). guard status takes
	// the original failurePolicy of a handed-off circuit only from a
	// HandedOff Event with it. The API does not authenticate it: whoever
	// may create Events in the namespace may write it too.
	ReportingController = "webhook-guard"
	// EventsNamespace holds the service's Events about cluster-scoped
	// objects (the webhook configurations, the guard policy): kube-system,
	// which policy engines' */* webhooks leave out, where client-go would
	// put them in default. kube-apiserver accepts an events.k8s.io Event
	// about a cluster-scoped object in either (core validation,
	// ValidateEventCreate).
	EventsNamespace = "kube-system"
)

// DisarmAfter is how long marking stays armed after a write that takes a
// bypass away (a closing, a handoff, "guard release"), or after an
// opening that did not happen: long enough for every kube-apiserver's
// webhook dispatcher to have seen that write, short enough that few
// objects the webhook mutated are marked. Whoever takes a bypass away
// keeps the circuit's entry in ArmingAnnotation in that write, and
// removes it in a later one, DisarmAfter after.
const DisarmAfter = 2 * time.Second

// PolicyDigestAnnotation is on the guard's ValidatingAdmissionPolicy: a
// digest of its rule as the guard that wrote it rendered it, targets
// aside. A replica of another version can tell that policy, untouched,
// from one someone changed, and so be ready during a rollout that changes
// the rule (the old leader keeps its own rule in place until it goes).
const PolicyDigestAnnotation = "webhook-guard.io/rule-digest"

// The names webhook-guard puts on objects admitted while a mutating
// webhook's circuit is open, and on the MutatingAdmissionPolicies that put
// them there (internal/marking). Also a contract with users: kubectl
// selectors and scripts use them.
const (
	// UnmutatedLabel marks an object admitted while a circuit was open;
	// its value is the circuit's ID, so "kubectl get -l
	// webhook-guard.io/unmutated" finds every marked object and
	// "-l webhook-guard.io/unmutated=<id>" those of one webhook.
	UnmutatedLabel = "webhook-guard.io/unmutated"
	// UnmutatedAnnotation says which webhook was skipped, and since when:
	// "<configuration>/<webhook> since <openedAt>".
	UnmutatedAnnotation = "webhook-guard.io/unmutated-by"
	// MarkingPolicyPrefix begins the name of every marking policy and
	// binding.
	MarkingPolicyPrefix = "webhook-guard-unmutated-"
	// MarksAnnotation on a marking policy names its circuit:
	// "<configuration>/<webhook>".
	MarksAnnotation = "webhook-guard.io/marks"
	// MarkedByAnnotation on a marking policy names the breaker that keeps
	// it; a policy without it, or by another breaker, is never touched.
	MarkedByAnnotation = "webhook-guard.io/by"
)

// The default installation's identity.
const (
	// DefaultNamespace is the namespace of the default installation.
	DefaultNamespace = "webhook-guard-system"
	// DefaultServiceAccount is the service's ServiceAccount.
	DefaultServiceAccount = "webhook-guard"
	// DefaultUsername is the service's username in the default
	// installation. The running service learns its real identity from a
	// SelfSubjectReview; this is only the fallback for rendering and tools.
	DefaultUsername = "system:serviceaccount:" + DefaultNamespace + ":" + DefaultServiceAccount
	// ReleaseSuffix ends the name of the release identity's
	// ServiceAccount: the Helm chart's pre-delete hook runs "guard
	// release" as DefaultServiceAccount + ReleaseSuffix
	// ("webhook-guard-release"), in the breaker's namespace.
	ReleaseSuffix = "-release"
)

// ReleaseUsername returns the release identity's username for the
// breaker's: breaker + ReleaseSuffix. For a ServiceAccount's username,
// system:serviceaccount:<namespace>:<name>, that is the ServiceAccount
// <name>-release in the same namespace, the one the Helm chart's
// pre-delete hook runs as beside the breaker's <name>. The guard holds
// this identity to a rule of the breaker's strength. For a breaker that is
// not a ServiceAccount the name is one nobody need hold: the rule only
// ever restricts whoever holds it.
func ReleaseUsername(breaker string) string {
	return breaker + ReleaseSuffix
}

// Mode is what the breaker does to a webhook while its circuit is open.
type Mode string

const (
	// ModeIgnore sets failurePolicy Ignore. Requests still wait for the
	// webhook's timeout before the apiserver moves on.
	ModeIgnore Mode = "Ignore"
	// ModeBypass sets failurePolicy Ignore and adds the BypassCondition,
	// so the apiserver skips the call and requests do not wait.
	ModeBypass Mode = "Bypass"
)

// Kind is the kind of webhook configuration a target lives in.
type Kind string

const (
	// KindMutating is a MutatingWebhookConfiguration: opening its circuit
	// admits objects without the webhook's mutation.
	KindMutating Kind = "Mutating"
	// KindValidating is a ValidatingWebhookConfiguration: opening its
	// circuit admits requests without the webhook's validation.
	KindValidating Kind = "Validating"
)

// Resource is the configuration kind's resource name, for example
// "mutatingwebhookconfigurations".
func (k Kind) Resource() string {
	if k == KindValidating {
		return "validatingwebhookconfigurations"
	}
	return "mutatingwebhookconfigurations"
}

// Singular is the resource's singular name, as kubectl spells it.
func (k Kind) Singular() string {
	if k == KindValidating {
		return "validatingwebhookconfiguration"
	}
	return "mutatingwebhookconfiguration"
}

// ObjectKind is the Go kind, for example "MutatingWebhookConfiguration".
func (k Kind) ObjectKind() string { return string(k) + "WebhookConfiguration" }
