// Package admissiontest holds the one case table for webhook-guard's
// ownership rule. The same table must give the same decisions through the Go
// rule (admission.Decide), the ValidatingAdmissionPolicy in a real
// kube-apiserver, and the static webhook (admission.Handler).
//
// The package imports only Kubernetes API types and the circuit contract, so
// that both the admission package's external tests and e2e tests can import
// it without a cycle: callers build admission.Options themselves from
// Case.ManagedConfigs and the breaker's username. Circuit records are written
// with the contract's own encoder.
//
// All cases are UPDATEs. Every object is valid for kube-apiserver as built:
// webhooks have fully-qualified names, an https://127.0.0.1:1/... URL,
// sideEffects None, admissionReviewVersions [v1] and an explicit
// failurePolicy (so apiserver defaulting cannot make nil and Fail differ).
// Starting objects that carry a circuit record or a bypass marker are what
// the breaker writes; an e2e test must create them as the breaker (or before
// the configuration is managed), since the guard stops anyone else.
package admissiontest

import (
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// Names of the table's objects and records.
const (
	// ManagedWebhook is the managed webhook of a managed configuration.
	ManagedWebhook = "slow.mutator.webhook-guard.io"
	// OtherWebhook is a second webhook of the same configuration, not managed.
	OtherWebhook = "other.mutator.webhook-guard.io"
	// OverrideReason is the reason the table's "present" override carries.
	OverrideReason = "incident INC-1234: restoring the webhook by hand"
	// OpenedAt is when the table's open circuits were opened.
	OpenedAt = "2026-11-30T10:00:00Z"
	// RecordUID is the configuration UID written in the table's circuit
	// records (admission does not read it).
	RecordUID = "00000000-0000-0000-0000-000000000001"
	// RecordReason is the failure reason in the table's circuit records.
	RecordReason = "timeout"
)

// Override values of Case.Override.
const (
	// OverridePresent sets the override annotation on New to OverrideReason.
	OverridePresent = "present"
	// OverrideAbsent removes the override annotation from New (a no-op when
	// Old has none).
	OverrideAbsent = "absent"
	// OverrideEmpty sets the override annotation on New to "".
	OverrideEmpty = "empty"
)

// NamePlaceholder and KindPlaceholder stand for the configuration name and
// its kind's singular resource name in Case.WantMessageContains;
// Case.WantMessage expands them.
const (
	NamePlaceholder = "{name}"
	KindPlaceholder = "{kind}"
)

// Actor is who sends a case's request.
type Actor string

// Actors of the table.
const (
	// Breaker is webhook-guard's own identity.
	Breaker Actor = "breaker"
	// Admin is a cluster administrator (system:masters).
	Admin Actor = "admin"
	// OtherSA is another service account with the same RBAC as the breaker.
	OtherSA Actor = "other-sa"
	// Releaser is the release identity, the ServiceAccount that "guard
	// release" runs as in the Helm chart's pre-delete hook; its username
	// is circuit.ReleaseUsername of the breaker's.
	Releaser Actor = "releaser"
)

// Usernames for UserInfo; an e2e test uses its own real identities instead.
const (
	// AdminUsername is the admin actor's username.
	AdminUsername = "kubernetes-admin"
	// OtherSAUsername is the other-sa actor's username.
	OtherSAUsername = "system:serviceaccount:webhook-guard-e2e:impostor"
)

// UserInfo returns the identity of actor a for unit tests, given the
// breaker's username.
func UserInfo(a Actor, breakerUsername string) authenticationv1.UserInfo {
	switch a {
	case Breaker:
		return authenticationv1.UserInfo{
			Username: breakerUsername,
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:webhook-guard-system", "system:authenticated"},
		}
	case OtherSA:
		return authenticationv1.UserInfo{
			Username: OtherSAUsername,
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:webhook-guard-e2e", "system:authenticated"},
		}
	case Releaser:
		return authenticationv1.UserInfo{
			Username: circuit.ReleaseUsername(breakerUsername),
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:webhook-guard-system", "system:authenticated"},
		}
	default:
		return authenticationv1.UserInfo{
			Username: AdminUsername,
			Groups:   []string{"system:masters", "system:authenticated"},
		}
	}
}

// Case is one row of the table: an UPDATE of a webhook configuration.
type Case struct {
	// Name reads as a sentence.
	Name string
	// Kind is the configuration's kind; empty means Mutating. Old and Edit
	// build the objects as MutatingWebhookConfigurations, the rule's view of
	// either kind; AsValidating turns them into the real objects.
	Kind circuit.Kind
	// Actor sends the request.
	Actor Actor
	// Managed is whether the configuration is in Options.Managed (or
	// ManagedValidating), with ManagedWebhook as its managed webhook.
	Managed bool
	// Old builds the starting object; name is the MWC name chosen by the
	// caller.
	Old func(name string) *admissionregistrationv1.MutatingWebhookConfiguration
	// Edit is applied to a deep copy of Old to produce New; nil edits nothing.
	Edit func(obj *admissionregistrationv1.MutatingWebhookConfiguration)
	// Override is OverridePresent, OverrideAbsent or OverrideEmpty, applied
	// to New after Edit.
	Override string
	// WantAllowed is the expected decision.
	WantAllowed bool
	// WantMessageContains is checked on denials by the Go rule and the
	// webhook, and the VAP renders the same message; NamePlaceholder stands
	// for the configuration name (see WantMessage).
	WantMessageContains []string
}

// Build returns the case's old and new objects for configuration name.
func (c Case) Build(name string) (old, new *admissionregistrationv1.MutatingWebhookConfiguration) {
	old = c.Old(name)
	new = old.DeepCopy()
	if c.Edit != nil {
		c.Edit(new)
	}
	switch c.Override {
	case OverridePresent:
		setAnnotation(new, circuit.OverrideAnnotation, OverrideReason)
	case OverrideEmpty:
		setAnnotation(new, circuit.OverrideAnnotation, "")
	default:
		delete(new.Annotations, circuit.OverrideAnnotation)
	}
	return old, new
}

// ManagedConfigs returns the Options.Managed map for running the case
// against configuration name: name with ManagedWebhook when the case is
// managed, otherwise only a different configuration.
func (c Case) ManagedConfigs(name string) map[string][]string {
	if c.Managed {
		return map[string][]string{name: {ManagedWebhook}}
	}
	return map[string][]string{name + "-elsewhere": {ManagedWebhook}}
}

// ConfigKind is the case's kind, Mutating when unset.
func (c Case) ConfigKind() circuit.Kind {
	if c.Kind == "" {
		return circuit.KindMutating
	}
	return c.Kind
}

// WantMessage returns WantMessageContains with NamePlaceholder replaced by
// name and KindPlaceholder by the kind's singular resource name.
func (c Case) WantMessage(name string) []string {
	out := make([]string, 0, len(c.WantMessageContains))
	for _, s := range c.WantMessageContains {
		out = append(out, strings.NewReplacer(NamePlaceholder, name, KindPlaceholder, c.ConfigKind().Singular()).Replace(s))
	}
	return out
}

// AsValidating returns the ValidatingWebhookConfiguration whose
// circuit.View is obj.
func AsValidating(obj *admissionregistrationv1.MutatingWebhookConfiguration) *admissionregistrationv1.ValidatingWebhookConfiguration {
	obj = obj.DeepCopy()
	out := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: obj.ObjectMeta,
	}
	for _, w := range obj.Webhooks {
		out.Webhooks = append(out.Webhooks, admissionregistrationv1.ValidatingWebhook{
			Name: w.Name, ClientConfig: w.ClientConfig, Rules: w.Rules, FailurePolicy: w.FailurePolicy,
			MatchPolicy: w.MatchPolicy, NamespaceSelector: w.NamespaceSelector, ObjectSelector: w.ObjectSelector,
			SideEffects: w.SideEffects, TimeoutSeconds: w.TimeoutSeconds, AdmissionReviewVersions: w.AdmissionReviewVersions,
			MatchConditions: w.MatchConditions,
		})
	}
	return out
}

// Field paths and the command that the Go message must contain.
const (
	// FailurePolicyPath is the managed webhook's failurePolicy path.
	FailurePolicyPath = "webhooks[name=" + ManagedWebhook + "].failurePolicy"
	// BypassPath is the managed webhook's bypass marker path.
	BypassPath = "webhooks[name=" + ManagedWebhook + "].matchConditions[name=" + circuit.BypassCondition + "]"
	// OtherBypassPath is the other webhook's bypass marker path.
	OtherBypassPath = "webhooks[name=" + OtherWebhook + "].matchConditions[name=" + circuit.BypassCondition + "]"
	// CircuitPath is the circuit annotation's path.
	CircuitPath = "metadata.annotations[" + circuit.Annotation + "]"
	// AnnotateCommand is the command that hands a configuration over.
	AnnotateCommand = "kubectl annotate " + KindPlaceholder + " " + NamePlaceholder + " " + circuit.OverrideAnnotation + `="<reason>"`
)

func want(paths ...string) []string {
	return append(paths, AnnotateCommand)
}

// Healthy is a managed-shaped configuration with no circuit open: both
// webhooks Fail, no marker, no record.
func Healthy(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta: metav1.TypeMeta{
			APIVersion: "admissionregistration.k8s.io/v1",
			Kind:       "MutatingWebhookConfiguration",
		},
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{"example.com/test": "admission"},
		},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			webhook(ManagedWebhook, "/slow"),
			webhook(OtherWebhook, "/other"),
		},
	}
}

// BypassOpen is Healthy after the breaker opened a Bypass circuit on
// ManagedWebhook: failurePolicy Ignore, the bypass marker, and the record.
func BypassOpen(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	obj := Healthy(name)
	openCircuit(obj, circuit.ModeBypass)
	return obj
}

// IgnoreOpen is Healthy after the breaker opened an Ignore circuit on
// ManagedWebhook: failurePolicy Ignore and the record, no marker.
func IgnoreOpen(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	obj := Healthy(name)
	openCircuit(obj, circuit.ModeIgnore)
	return obj
}

// Overridden is BypassOpen handed over to administrators with a non-empty
// override annotation.
func Overridden(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	obj := BypassOpen(name)
	setAnnotation(obj, circuit.OverrideAnnotation, OverrideReason)
	return obj
}

// HandedOffAt is when the table's handed-off entries were handed off.
const HandedOffAt = "2026-11-30T11:00:00Z"

// HandedOff is Overridden after the breaker's handoff: the bypass marker
// is gone, failurePolicy stays Ignore, and the record entry stays, with
// its original, marked handed off.
func HandedOff(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	obj := Overridden(name)
	removeMarker(findHook(obj, ManagedWebhook))
	setAnnotation(obj, circuit.Annotation, recordText(circuit.Record{ManagedWebhook: handedOff(entry(circuit.ModeBypass, OpenedAt, admissionregistrationv1.Fail))}))
	return obj
}

// HandedBack is HandedOff after an administrator removed the override:
// the breaker's again, held open in Ignore.
func HandedBack(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	obj := HandedOff(name)
	delete(obj.Annotations, circuit.OverrideAnnotation)
	return obj
}

func handedOff(e circuit.Entry) circuit.Entry {
	at, err := time.Parse(time.RFC3339, HandedOffAt)
	if err != nil {
		panic("admissiontest: " + err.Error())
	}
	e.HandedOffAt = ptr.To(metav1.NewTime(at))
	return e
}

// handOff is the breaker's handoff of BypassOpen: HandedOff's marker and
// record.
func handOff(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	handed := HandedOff(obj.Name)
	removeMarker(findHook(obj, ManagedWebhook))
	setAnnotation(obj, circuit.Annotation, handed.Annotations[circuit.Annotation])
}

// forgeHandedOffOriginal rewrites the handed-off entry to say the original
// was Ignore.
func forgeHandedOffOriginal(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	setAnnotation(obj, circuit.Annotation, recordText(circuit.Record{ManagedWebhook: handedOff(entry(circuit.ModeBypass, OpenedAt, admissionregistrationv1.Ignore))}))
}

// resignHandedOff signs the handed-off entry anew, as a takeover of a
// retired installation's circuits does.
func resignHandedOff(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	e := handedOff(entry(circuit.ModeBypass, OpenedAt, admissionregistrationv1.Fail))
	e.By = "system:serviceaccount:webhook-guard-system:webhook-guard"
	setAnnotation(obj, circuit.Annotation, recordText(circuit.Record{ManagedWebhook: e}))
}

// KeepsOriginal is what a denial says of a handed-off entry the breaker
// or the release identity changes or drops without putting its original
// back.
const KeepsOriginal = "handed off: it keeps its original until a write puts that back, or an administrator removes it"

// KeptOriginal is the denial's item for ManagedWebhook's handed-off entry.
const KeptOriginal = CircuitPath + " entry " + ManagedWebhook + " (" + KeepsOriginal + ")"

// CircuitRecord returns the breaker's record of an open circuit on
// ManagedWebhook in mode, opened at openedAt (RFC 3339), as the breaker's
// encoder writes it.
func CircuitRecord(mode circuit.Mode, openedAt string) string {
	return recordText(circuit.Record{ManagedWebhook: entry(mode, openedAt, admissionregistrationv1.Fail)})
}

// entry is a record entry of a circuit opened in mode at openedAt (RFC
// 3339) on a webhook whose failurePolicy was original.
func entry(mode circuit.Mode, openedAt string, original admissionregistrationv1.FailurePolicyType) circuit.Entry {
	at, err := time.Parse(time.RFC3339, openedAt)
	if err != nil {
		panic("admissiontest: " + err.Error())
	}
	return circuit.Entry{
		UID:                   RecordUID,
		Mode:                  mode,
		OpenedAt:              metav1.NewTime(at),
		Reason:                RecordReason,
		OriginalFailurePolicy: ptr.To(original),
	}
}

// recordText is rec as the breaker's encoder writes it.
func recordText(rec circuit.Record) string {
	text, err := rec.Text()
	if err != nil {
		panic("admissiontest: " + err.Error())
	}
	return text
}

func openCircuit(obj *admissionregistrationv1.MutatingWebhookConfiguration, mode circuit.Mode) {
	hook := findHook(obj, ManagedWebhook)
	hook.FailurePolicy = policy(admissionregistrationv1.Ignore)
	if mode == circuit.ModeBypass {
		addMarker(hook, circuit.BypassExpression)
	}
	setAnnotation(obj, circuit.Annotation, CircuitRecord(mode, OpenedAt))
}

func webhook(name, path string) admissionregistrationv1.MutatingWebhook {
	url := "https://127.0.0.1:1" + path
	sideEffects := admissionregistrationv1.SideEffectClassNone
	timeout := int32(10)
	return admissionregistrationv1.MutatingWebhook{
		Name:                    name,
		ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
		FailurePolicy:           policy(admissionregistrationv1.Fail),
		SideEffects:             &sideEffects,
		TimeoutSeconds:          &timeout,
		AdmissionReviewVersions: []string{"v1"},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{
				APIGroups:   []string{""},
				APIVersions: []string{"v1"},
				Resources:   []string{"configmaps"},
			},
		}},
		// Only objects labelled for the test are sent, so a configuration
		// left behind by a failed e2e run disturbs nothing.
		ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"example.com/test": "never"}},
	}
}

func policy(p admissionregistrationv1.FailurePolicyType) *admissionregistrationv1.FailurePolicyType {
	return &p
}

func findHook(obj *admissionregistrationv1.MutatingWebhookConfiguration, name string) *admissionregistrationv1.MutatingWebhook {
	for i := range obj.Webhooks {
		if obj.Webhooks[i].Name == name {
			return &obj.Webhooks[i]
		}
	}
	panic("admissiontest: no webhook " + name)
}

func addMarker(hook *admissionregistrationv1.MutatingWebhook, expression string) {
	hook.MatchConditions = append(hook.MatchConditions, admissionregistrationv1.MatchCondition{
		Name:       circuit.BypassCondition,
		Expression: expression,
	})
}

func removeMarker(hook *admissionregistrationv1.MutatingWebhook) {
	var kept []admissionregistrationv1.MatchCondition
	for _, c := range hook.MatchConditions {
		if c.Name != circuit.BypassCondition {
			kept = append(kept, c)
		}
	}
	hook.MatchConditions = kept
}

func setAnnotation(obj *admissionregistrationv1.MutatingWebhookConfiguration, key, value string) {
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	obj.Annotations[key] = value
}

// BreakerOverreach starts the denial of the breaker's identity changing
// more than it owns.
const BreakerOverreach = "webhook-guard's own identity"

// Paths, with the reason, that the denial of the breaker's identity names
// for the metadata beyond labels and annotations.
const (
	// OwnerReferencesChange names a change to the owner references.
	OwnerReferencesChange = "metadata.ownerReferences (the garbage collector deletes a configuration whose owners are gone)"
	// FinalizersChange names a change to the finalizers.
	FinalizersChange = "metadata.finalizers (a finalizer holds the configuration's deletion until someone removes it)"
	// GenerateNameChange names a change to generateName.
	GenerateNameChange = "metadata.generateName"
	// BreakerOwns is what the denial says the breaker may change.
	BreakerOwns = "no metadata but its record (" + CircuitPath + ")"
)

// ReleaserOverreach starts the denial of the release identity changing
// more than a release changes.
const ReleaserOverreach = "webhook-guard's release identity"

// NotRestored is what the denial of the release identity says of a
// managed failurePolicy it changes to anything but the record's original.
const NotRestored = "not back to the originalFailurePolicy of its circuit record entry"

// AddedWebhook is the name of the webhook the table adds.
const AddedWebhook = "added.mutator.webhook-guard.io"

func addWebhook(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	obj.Webhooks = append(obj.Webhooks, webhook(AddedWebhook, "/added"))
}

// ClosedWithRecord is Healthy with the record of an Ignore circuit on
// ManagedWebhook (originalFailurePolicy Fail) left over: a record entry
// whose failurePolicy is already the original.
func ClosedWithRecord(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	obj := Healthy(name)
	forgeRecord(obj)
	return obj
}

// NotApproved is what a denial says of a change to the bypass marker or
// the failurePolicy of a webhook that is not an approved target of its
// configuration (not one of its managed webhooks).
const NotApproved = "not an approved target of webhook-guard"

// Paths of OtherWebhook's owned fields, with the change and NotApproved,
// as a denial names them.
const (
	// OtherMarkerAdded names a bypass marker added to OtherWebhook.
	OtherMarkerAdded = OtherBypassPath + " (added, " + NotApproved + ")"
	// OtherMarkerRemoved names a bypass marker removed from OtherWebhook.
	OtherMarkerRemoved = OtherBypassPath + " (removed, " + NotApproved + ")"
	// OtherIgnoreSet names OtherWebhook's failurePolicy set from Fail to
	// Ignore.
	OtherIgnoreSet = "webhooks[name=" + OtherWebhook + "].failurePolicy (Fail -> Ignore, " + NotApproved + ")"
)

// OnlyRemovesEntries is what the denial of the release identity says of
// a circuit record it adds or changes other than by removing entries.
const OnlyRemovesEntries = "a release only removes entries of the stored record"

// GoneWebhook is a webhook that is no longer in the configuration, with
// an entry left in TwoOpen's record.
const GoneWebhook = "gone.mutator.webhook-guard.io"

// OtherBypassed is Healthy with the bypass marker on OtherWebhook, which
// is not a managed webhook: as an administrator with the override leaves
// it.
func OtherBypassed(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	obj := Healthy(name)
	addOtherMarker(obj)
	return obj
}

// ForgedOriginal is Healthy with a record entry on ManagedWebhook whose
// originalFailurePolicy is Ignore while the webhook holds Fail: what the
// first write of a forged original would leave, and what the breaker
// leaves when a webhook that was Ignore opens in Bypass mode and an
// administrator then sets Fail with the override.
func ForgedOriginal(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	obj := Healthy(name)
	setAnnotation(obj, circuit.Annotation, recordText(circuit.Record{ManagedWebhook: entry(circuit.ModeIgnore, OpenedAt, admissionregistrationv1.Ignore)}))
	return obj
}

// TwoOpen is IgnoreOpen with a second record entry, for GoneWebhook.
func TwoOpen(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	obj := IgnoreOpen(name)
	setAnnotation(obj, circuit.Annotation, twoEntries())
	return obj
}

func twoEntries() string {
	return recordText(circuit.Record{
		ManagedWebhook: entry(circuit.ModeIgnore, OpenedAt, admissionregistrationv1.Fail),
		GoneWebhook:    entry(circuit.ModeIgnore, OpenedAt, admissionregistrationv1.Fail),
	})
}

// addEntry adds GoneWebhook's entry to the record of an Ignore circuit.
func addEntry(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	setAnnotation(obj, circuit.Annotation, twoEntries())
}

// releaseManagedOnly restores ManagedWebhook from TwoOpen and removes its
// entry, as "guard release" of that webhook alone writes it: the other
// entry stays, byte for byte.
func releaseManagedOnly(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	findHook(obj, ManagedWebhook).FailurePolicy = policy(admissionregistrationv1.Fail)
	setAnnotation(obj, circuit.Annotation, recordText(circuit.Record{GoneWebhook: entry(circuit.ModeIgnore, OpenedAt, admissionregistrationv1.Fail)}))
}

// forgeOriginal writes a record whose entry says ManagedWebhook's
// originalFailurePolicy was Ignore.
func forgeOriginal(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	setAnnotation(obj, circuit.Annotation, ForgedOriginal(obj.Name).Annotations[circuit.Annotation])
}

// forgeSpacedOriginal writes forgeOriginal's record with a space before
// the entry's colon: JSON reads it as the breaker would, while an entry
// pattern does not find it.
func forgeSpacedOriginal(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	forgeOriginal(obj)
	obj.Annotations[circuit.Annotation] = strings.Replace(obj.Annotations[circuit.Annotation], `":{`, `" :{`, 1)
}

func removeOtherMarker(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	removeMarker(findHook(obj, OtherWebhook))
}

func withEmptyOverride(old func(string) *admissionregistrationv1.MutatingWebhookConfiguration) func(string) *admissionregistrationv1.MutatingWebhookConfiguration {
	return func(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
		obj := old(name)
		setAnnotation(obj, circuit.OverrideAnnotation, "")
		return obj
	}
}

// withArming is old with the marking's arming entries, as the breaker
// leaves them for a moment after a closing.
func withArming(old func(string) *admissionregistrationv1.MutatingWebhookConfiguration) func(string) *admissionregistrationv1.MutatingWebhookConfiguration {
	return func(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
		obj := old(name)
		armMarking(obj)
		return obj
	}
}

// repoint sends hook's calls somewhere else.
func repoint(hook string) func(*admissionregistrationv1.MutatingWebhookConfiguration) {
	return func(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
		url := "https://127.0.0.1:2/elsewhere"
		findHook(obj, hook).ClientConfig.URL = &url
	}
}

// Edits used by the table.

func setPolicy(hook string, p admissionregistrationv1.FailurePolicyType) func(*admissionregistrationv1.MutatingWebhookConfiguration) {
	return func(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
		findHook(obj, hook).FailurePolicy = policy(p)
	}
}

func openBypass(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	openCircuit(obj, circuit.ModeBypass)
}

func openIgnore(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	openCircuit(obj, circuit.ModeIgnore)
}

// closeCircuit undoes openCircuit: Fail, no marker, no record.
func closeCircuit(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	hook := findHook(obj, ManagedWebhook)
	hook.FailurePolicy = policy(admissionregistrationv1.Fail)
	removeMarker(hook)
	delete(obj.Annotations, circuit.Annotation)
}

func setTimeout(seconds int32) func(*admissionregistrationv1.MutatingWebhookConfiguration) {
	return func(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
		findHook(obj, ManagedWebhook).TimeoutSeconds = &seconds
	}
}

func addUpdateRule(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	hook := findHook(obj, ManagedWebhook)
	hook.Rules[0].Operations = append(hook.Rules[0].Operations, admissionregistrationv1.Update)
}

func forgeRecord(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	setAnnotation(obj, circuit.Annotation, CircuitRecord(circuit.ModeIgnore, OpenedAt))
}

func removeRecord(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	delete(obj.Annotations, circuit.Annotation)
}

func changeRecord(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	setAnnotation(obj, circuit.Annotation, CircuitRecord(circuit.ModeBypass, "2026-11-30T11:00:00Z"))
}

func removeManagedMarker(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	removeMarker(findHook(obj, ManagedWebhook))
}

func addManagedMarker(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	addMarker(findHook(obj, ManagedWebhook), circuit.BypassExpression)
}

func addOtherMarker(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	addMarker(findHook(obj, OtherWebhook), circuit.BypassExpression)
}

func alterMarker(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	hook := findHook(obj, ManagedWebhook)
	for i := range hook.MatchConditions {
		if hook.MatchConditions[i].Name == circuit.BypassCondition {
			hook.MatchConditions[i].Expression = "true"
		}
	}
}

func removeManagedWebhook(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	var kept []admissionregistrationv1.MutatingWebhook
	for _, h := range obj.Webhooks {
		if h.Name != ManagedWebhook {
			kept = append(kept, h)
		}
	}
	obj.Webhooks = kept
}

func addLabel(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	obj.Labels["team"] = "platform"
}

func changeLabel(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	obj.Labels["example.com/test"] = "changed"
}

// armMarking writes the marking's arming entries, as the breaker does
// around a transition.
func armMarking(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	setAnnotation(obj, circuit.ArmingAnnotation, CircuitRecord(circuit.ModeBypass, "2026-11-30T11:00:00Z"))
}

func addAnnotation(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	setAnnotation(obj, "example.com/note", "written by the breaker")
}

// Owner is the owner reference the table adds: a Namespace that does not
// exist. On a configuration, it would have the garbage collector delete
// the configuration.
var Owner = metav1.OwnerReference{
	APIVersion: "v1",
	Kind:       "Namespace",
	Name:       "webhook-guard-gone",
	UID:        "00000000-0000-0000-0000-0000000000ff",
}

// Finalizer is the finalizer the table adds.
const Finalizer = "example.com/hold"

func addOwner(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	obj.OwnerReferences = append(obj.OwnerReferences, Owner)
}

func removeOwners(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	obj.OwnerReferences = nil
}

// Owned is Healthy with Owner as its owner.
func Owned(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	obj := Healthy(name)
	addOwner(obj)
	return obj
}

func addFinalizer(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	obj.Finalizers = append(obj.Finalizers, Finalizer)
}

func setGenerateName(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	obj.GenerateName = "generated-"
}

func all(edits ...func(*admissionregistrationv1.MutatingWebhookConfiguration)) func(*admissionregistrationv1.MutatingWebhookConfiguration) {
	return func(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
		for _, e := range edits {
			e(obj)
		}
	}
}

// Cases returns the table: every mutating case, then the validating
// ones. Each call returns fresh values.
func Cases() []Case {
	mutating := mutatingCases()
	out := append([]Case(nil), mutating...)
	for _, c := range mutating {
		if validatingCases[c.Name] {
			c.Kind = circuit.KindValidating
			c.Name = "validating: " + c.Name
			out = append(out, c)
		}
	}
	return out
}

// validatingCases names the mutating cases that are repeated on a
// ValidatingWebhookConfiguration: every actor, every owned field, the
// override, and fields the breaker does not own.
var validatingCases = map[string]bool{
	"the breaker opens a Bypass circuit":                                                                     true,
	"the breaker closes an Ignore circuit":                                                                   true,
	"an admin restores Fail while the circuit is open":                                                       true,
	"an admin restores Fail with an override":                                                                true,
	"an admin restores Fail while removing the override":                                                     true,
	"an admin closes the circuit by hand":                                                                    true,
	"another service account opens a circuit":                                                                true,
	"another service account forges a circuit record":                                                        true,
	"an admin removes the circuit record":                                                                    true,
	"an admin adds a bypass marker to the other webhook":                                                     true,
	"an admin changes only timeoutSeconds while the circuit is open":                                         true,
	"an admin changes the other webhook's failurePolicy in the same configuration":                           true,
	"an admin removes the override annotation alone":                                                         true,
	"another service account forges a circuit record on an unmanaged configuration":                          true,
	"the breaker adds an ownerReference":                                                                     true,
	"the breaker adds a finalizer":                                                                           true,
	"the breaker changes its record and another annotation":                                                  true,
	"the breaker changes only its record":                                                                    true,
	"the breaker arms marking before an opening":                                                             true,
	"an admin adds an ownerReference while the circuit is open":                                              true,
	"the release identity restores a Bypass circuit from the record with an override":                        true,
	"the release identity repoints a webhook's clientConfig with an override":                                true,
	"the release identity adds a webhook with an override":                                                   true,
	"the release identity sets a failurePolicy other than the record's original":                             true,
	"the release identity removes the override annotation alone":                                             true,
	"the breaker adds a bypass marker to a webhook that is not an approved target":                           true,
	"the release identity adds a bypass marker to a webhook that is not an approved target with an override": true,
	"an admin adds a bypass marker to a webhook that is not an approved target with an override":             true,
	"the release identity changes a record entry's original with an override":                                true,
	"the release identity restores one webhook and keeps the other record entry":                             true,
}

func mutatingCases() []Case {
	restoreFail := setPolicy(ManagedWebhook, admissionregistrationv1.Fail)
	return []Case{
		// The breaker.
		{Name: "the breaker opens an Ignore circuit", Actor: Breaker, Managed: true, Old: Healthy, Edit: openIgnore, Override: OverrideAbsent, WantAllowed: true},
		{Name: "the breaker opens a Bypass circuit", Actor: Breaker, Managed: true, Old: Healthy, Edit: openBypass, Override: OverrideAbsent, WantAllowed: true},
		{Name: "the breaker closes a Bypass circuit", Actor: Breaker, Managed: true, Old: BypassOpen, Edit: closeCircuit, Override: OverrideAbsent, WantAllowed: true},
		{Name: "the breaker closes an Ignore circuit", Actor: Breaker, Managed: true, Old: IgnoreOpen, Edit: closeCircuit, Override: OverrideAbsent, WantAllowed: true},
		{Name: "the breaker opens a circuit on a configuration with an empty override", Actor: Breaker, Managed: true, Old: withEmptyOverride(Healthy), Edit: openBypass, Override: OverrideEmpty, WantAllowed: true},
		{Name: "the breaker changes only timeoutSeconds", Actor: Breaker, Managed: true, Old: BypassOpen, Edit: setTimeout(5), Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, "webhooks[name=" + ManagedWebhook + "]"}},
		{Name: "the breaker repoints a webhook's clientConfig", Actor: Breaker, Managed: true, Old: Healthy, Edit: repoint(OtherWebhook), Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, "webhooks[name=" + OtherWebhook + "]"}},
		{Name: "the breaker opens a circuit and repoints the webhook", Actor: Breaker, Managed: true, Old: Healthy, Edit: all(openBypass, repoint(ManagedWebhook)), Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, "webhooks[name=" + ManagedWebhook + "]"}},
		{Name: "the breaker adds a label", Actor: Breaker, Managed: true, Old: Healthy, Edit: addLabel, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, "metadata.labels"}},
		{Name: "the breaker adds the override annotation", Actor: Breaker, Managed: true, Old: Healthy, Override: OverridePresent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, "metadata.annotations"}},
		{Name: "the breaker removes a webhook", Actor: Breaker, Managed: true, Old: Healthy, Edit: removeManagedWebhook, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, "webhooks (added, removed or reordered)"}},
		{Name: "the breaker sets another webhook's failurePolicy", Actor: Breaker, Managed: true, Old: Healthy, Edit: setPolicy(OtherWebhook, admissionregistrationv1.Ignore), Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, OtherIgnoreSet}},

		// The breaker and metadata: nothing but its record.
		{Name: "the breaker adds an ownerReference", Actor: Breaker, Managed: true, Old: Healthy, Edit: addOwner, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, BreakerOwns, OwnerReferencesChange}},
		{Name: "the breaker opens a circuit and adds an ownerReference", Actor: Breaker, Managed: true, Old: Healthy, Edit: all(openBypass, addOwner), Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, OwnerReferencesChange}},
		{Name: "the breaker removes the ownerReferences", Actor: Breaker, Managed: true, Old: Owned, Edit: removeOwners, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, OwnerReferencesChange}},
		{Name: "the breaker adds a finalizer", Actor: Breaker, Managed: true, Old: Healthy, Edit: addFinalizer, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, BreakerOwns, FinalizersChange}},
		{Name: "the breaker closes a circuit and adds a finalizer", Actor: Breaker, Managed: true, Old: BypassOpen, Edit: all(closeCircuit, addFinalizer), Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, FinalizersChange}},
		{Name: "the breaker changes a label's value", Actor: Breaker, Managed: true, Old: Healthy, Edit: changeLabel, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, "metadata.labels"}},
		{Name: "the breaker changes its record and another annotation", Actor: Breaker, Managed: true, Old: BypassOpen, Edit: all(changeRecord, addAnnotation), Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, "metadata.annotations"}},
		{Name: "the breaker sets generateName", Actor: Breaker, Managed: true, Old: Healthy, Edit: setGenerateName, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, GenerateNameChange}},
		{Name: "the breaker adds an ownerReference, a finalizer and a label", Actor: Breaker, Managed: true, Old: Healthy, Edit: all(addOwner, addFinalizer, addLabel), Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, "metadata.labels, " + OwnerReferencesChange + ", " + FinalizersChange}},
		{Name: "the breaker changes only its record", Actor: Breaker, Managed: true, Old: BypassOpen, Edit: changeRecord, Override: OverrideAbsent, WantAllowed: true},
		{Name: "the breaker arms marking before an opening", Actor: Breaker, Managed: true, Old: Healthy, Edit: armMarking, Override: OverrideAbsent, WantAllowed: true},
		{Name: "the breaker arms marking and adds another annotation", Actor: Breaker, Managed: true, Old: Healthy, Edit: all(armMarking, addAnnotation), Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, "metadata.annotations"}},
		{Name: "the breaker closes a circuit and keeps marking armed", Actor: Breaker, Managed: true, Old: BypassOpen, Edit: all(closeCircuit, armMarking), Override: OverrideAbsent, WantAllowed: true},
		{Name: "the breaker opens a circuit on a configuration with an owner", Actor: Breaker, Managed: true, Old: Owned, Edit: openBypass, Override: OverrideAbsent, WantAllowed: true},

		// An administrator and the owned failurePolicy.
		{Name: "an admin restores Fail while the circuit is open", Actor: Admin, Managed: true, Old: BypassOpen, Edit: restoreFail, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(FailurePolicyPath, "circuit open since "+OpenedAt+", original failurePolicy Fail", "webhook-guard (")},
		{Name: "an admin restores Fail with an override", Actor: Admin, Managed: true, Old: BypassOpen, Edit: restoreFail, Override: OverridePresent, WantAllowed: true},
		{Name: "an admin restores Fail with an empty override", Actor: Admin, Managed: true, Old: BypassOpen, Edit: restoreFail, Override: OverrideEmpty, WantAllowed: false, WantMessageContains: want(FailurePolicyPath)},
		{Name: "an admin restores Fail on an Ignore circuit", Actor: Admin, Managed: true, Old: IgnoreOpen, Edit: restoreFail, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(FailurePolicyPath, "circuit open since "+OpenedAt)},
		{Name: "an admin sets Ignore on a healthy managed webhook", Actor: Admin, Managed: true, Old: Healthy, Edit: setPolicy(ManagedWebhook, admissionregistrationv1.Ignore), Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(FailurePolicyPath)},
		{Name: "an admin closes the circuit by hand", Actor: Admin, Managed: true, Old: BypassOpen, Edit: closeCircuit, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(FailurePolicyPath, BypassPath, CircuitPath)},
		{Name: "an admin closes the circuit by hand with an override", Actor: Admin, Managed: true, Old: BypassOpen, Edit: closeCircuit, Override: OverridePresent, WantAllowed: true},
		{Name: "an admin restores Fail on a configuration already handed over", Actor: Admin, Managed: true, Old: Overridden, Edit: restoreFail, Override: OverridePresent, WantAllowed: true},
		{Name: "an admin restores Fail while removing the override", Actor: Admin, Managed: true, Old: Overridden, Edit: restoreFail, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(FailurePolicyPath, "--overwrite")},

		// Another service account with the breaker's RBAC.
		{Name: "another service account restores Fail while the circuit is open", Actor: OtherSA, Managed: true, Old: BypassOpen, Edit: restoreFail, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(FailurePolicyPath, OtherSAUsername)},
		{Name: "another service account opens a circuit", Actor: OtherSA, Managed: true, Old: Healthy, Edit: openBypass, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(FailurePolicyPath, BypassPath, CircuitPath)},
		{Name: "another service account forges a circuit record", Actor: OtherSA, Managed: true, Old: Healthy, Edit: forgeRecord, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(CircuitPath)},
		{Name: "another service account forges a circuit record with an empty override", Actor: OtherSA, Managed: true, Old: Healthy, Edit: forgeRecord, Override: OverrideEmpty, WantAllowed: false, WantMessageContains: want(CircuitPath)},
		{Name: "another service account opens a circuit with an override", Actor: OtherSA, Managed: true, Old: Healthy, Edit: openBypass, Override: OverridePresent, WantAllowed: true},

		// The circuit record.
		{Name: "an admin removes the circuit record", Actor: Admin, Managed: true, Old: BypassOpen, Edit: removeRecord, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(CircuitPath, "circuit open since "+OpenedAt)},
		{Name: "an admin changes the circuit record", Actor: Admin, Managed: true, Old: BypassOpen, Edit: changeRecord, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(CircuitPath)},
		{Name: "an admin removes the circuit record with an override", Actor: Admin, Managed: true, Old: BypassOpen, Edit: removeRecord, Override: OverridePresent, WantAllowed: true},

		// The bypass marker.
		{Name: "an admin removes the bypass marker", Actor: Admin, Managed: true, Old: BypassOpen, Edit: removeManagedMarker, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(BypassPath)},
		{Name: "an admin adds a bypass marker to a healthy managed webhook", Actor: Admin, Managed: true, Old: Healthy, Edit: addManagedMarker, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(BypassPath)},
		{Name: "an admin alters the bypass marker's expression", Actor: Admin, Managed: true, Old: BypassOpen, Edit: alterMarker, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(BypassPath)},
		{Name: "an admin adds a bypass marker to the other webhook", Actor: Admin, Managed: true, Old: Healthy, Edit: addOtherMarker, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(OtherMarkerAdded)},
		{Name: "an admin removes the managed webhook that carries the bypass marker", Actor: Admin, Managed: true, Old: BypassOpen, Edit: removeManagedWebhook, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(BypassPath)},
		{Name: "an admin alters the bypass marker with an override", Actor: Admin, Managed: true, Old: BypassOpen, Edit: alterMarker, Override: OverridePresent, WantAllowed: true},

		// Fields the breaker does not own.
		{Name: "an admin changes only timeoutSeconds", Actor: Admin, Managed: true, Old: Healthy, Edit: setTimeout(5), Override: OverrideAbsent, WantAllowed: true},
		{Name: "an admin changes only timeoutSeconds while the circuit is open", Actor: Admin, Managed: true, Old: BypassOpen, Edit: setTimeout(5), Override: OverrideAbsent, WantAllowed: true},
		{Name: "an admin changes the rules while the circuit is open", Actor: Admin, Managed: true, Old: IgnoreOpen, Edit: addUpdateRule, Override: OverrideAbsent, WantAllowed: true},
		{Name: "another service account changes only timeoutSeconds", Actor: OtherSA, Managed: true, Old: BypassOpen, Edit: setTimeout(5), Override: OverrideAbsent, WantAllowed: true},
		{Name: "an admin changes the other webhook's failurePolicy in the same configuration", Actor: Admin, Managed: true, Old: BypassOpen, Edit: setPolicy(OtherWebhook, admissionregistrationv1.Ignore), Override: OverrideAbsent, WantAllowed: true},
		{Name: "an admin removes the managed webhook from a healthy configuration", Actor: Admin, Managed: true, Old: Healthy, Edit: removeManagedWebhook, Override: OverrideAbsent, WantAllowed: true},
		{Name: "an admin adds a label while the circuit is open", Actor: Admin, Managed: true, Old: BypassOpen, Edit: addLabel, Override: OverrideAbsent, WantAllowed: true},
		{Name: "an admin adds an ownerReference while the circuit is open", Actor: Admin, Managed: true, Old: BypassOpen, Edit: addOwner, Override: OverrideAbsent, WantAllowed: true},
		{Name: "an admin removes the ownerReferences", Actor: Admin, Managed: true, Old: Owned, Edit: removeOwners, Override: OverrideAbsent, WantAllowed: true},
		{Name: "an admin removes the marking's arming entries", Actor: Admin, Managed: true, Old: withArming(BypassOpen), Edit: func(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
			delete(obj.Annotations, circuit.ArmingAnnotation)
		}, Override: OverrideAbsent, WantAllowed: true},
		{Name: "an admin changes another annotation while the circuit is open", Actor: Admin, Managed: true, Old: BypassOpen, Edit: addAnnotation, Override: OverrideAbsent, WantAllowed: true},
		{Name: "another service account adds an ownerReference", Actor: OtherSA, Managed: true, Old: Healthy, Edit: addOwner, Override: OverrideAbsent, WantAllowed: true},
		{Name: "an admin adds an ownerReference and restores Fail", Actor: Admin, Managed: true, Old: BypassOpen, Edit: all(addOwner, restoreFail), Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(FailurePolicyPath)},

		// The override annotation itself.
		{Name: "an admin adds the override annotation alone", Actor: Admin, Managed: true, Old: BypassOpen, Override: OverridePresent, WantAllowed: true},
		{Name: "an admin adds an empty override annotation alone", Actor: Admin, Managed: true, Old: BypassOpen, Override: OverrideEmpty, WantAllowed: true},
		{Name: "an admin removes the override annotation alone", Actor: Admin, Managed: true, Old: Overridden, Override: OverrideAbsent, WantAllowed: true},

		// The release identity: what "guard release" writes, and nothing
		// more, even with the override.
		{Name: "the release identity restores a Bypass circuit from the record with an override", Actor: Releaser, Managed: true, Old: BypassOpen, Edit: all(closeCircuit, armMarking), Override: OverridePresent, WantAllowed: true},
		{Name: "the release identity restores an Ignore circuit from the record with an override", Actor: Releaser, Managed: true, Old: IgnoreOpen, Edit: all(closeCircuit, armMarking), Override: OverridePresent, WantAllowed: true},
		{Name: "the release identity removes the record entry of a configuration already handed over", Actor: Releaser, Managed: true, Old: Overridden, Edit: removeRecord, Override: OverridePresent, WantAllowed: true},
		{Name: "the release identity removes the override annotation alone", Actor: Releaser, Managed: true, Old: Overridden, Override: OverrideAbsent, WantAllowed: true},
		{Name: "the release identity removes the marking's arming entries", Actor: Releaser, Managed: true, Old: withArming(Healthy), Edit: func(obj *admissionregistrationv1.MutatingWebhookConfiguration) {
			delete(obj.Annotations, circuit.ArmingAnnotation)
		}, Override: OverrideAbsent, WantAllowed: true},
		{Name: "the release identity restores a circuit without an override", Actor: Releaser, Managed: true, Old: BypassOpen, Edit: closeCircuit, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(FailurePolicyPath, BypassPath, CircuitPath)},
		{Name: "the release identity repoints a webhook's clientConfig with an override", Actor: Releaser, Managed: true, Old: Healthy, Edit: repoint(OtherWebhook), Override: OverridePresent, WantAllowed: false, WantMessageContains: []string{ReleaserOverreach, "webhooks[name=" + OtherWebhook + "]"}},
		{Name: "the release identity restores a circuit and repoints the webhook", Actor: Releaser, Managed: true, Old: BypassOpen, Edit: all(closeCircuit, repoint(ManagedWebhook)), Override: OverridePresent, WantAllowed: false, WantMessageContains: []string{ReleaserOverreach, "webhooks[name=" + ManagedWebhook + "]"}},
		{Name: "the release identity adds a webhook with an override", Actor: Releaser, Managed: true, Old: Healthy, Edit: addWebhook, Override: OverridePresent, WantAllowed: false, WantMessageContains: []string{ReleaserOverreach, "webhooks (added, removed or reordered)"}},
		{Name: "the release identity removes a webhook with an override", Actor: Releaser, Managed: true, Old: Healthy, Edit: removeManagedWebhook, Override: OverridePresent, WantAllowed: false, WantMessageContains: []string{ReleaserOverreach, "webhooks (added, removed or reordered)"}},
		{Name: "the release identity changes a label", Actor: Releaser, Managed: true, Old: Healthy, Edit: changeLabel, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{ReleaserOverreach, "metadata.labels"}},
		{Name: "the release identity adds another annotation with an override", Actor: Releaser, Managed: true, Old: BypassOpen, Edit: addAnnotation, Override: OverridePresent, WantAllowed: false, WantMessageContains: []string{ReleaserOverreach, "metadata.annotations"}},
		{Name: "the release identity adds an ownerReference and a finalizer", Actor: Releaser, Managed: true, Old: Healthy, Edit: all(addOwner, addFinalizer), Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{ReleaserOverreach, OwnerReferencesChange + ", " + FinalizersChange}},
		{Name: "the release identity sets Ignore with no record entry", Actor: Releaser, Managed: true, Old: Healthy, Edit: setPolicy(ManagedWebhook, admissionregistrationv1.Ignore), Override: OverridePresent, WantAllowed: false, WantMessageContains: []string{ReleaserOverreach, FailurePolicyPath + " (Fail -> Ignore, " + NotRestored + ")"}},
		{Name: "the release identity sets a failurePolicy other than the record's original", Actor: Releaser, Managed: true, Old: ClosedWithRecord, Edit: setPolicy(ManagedWebhook, admissionregistrationv1.Ignore), Override: OverridePresent, WantAllowed: false, WantMessageContains: []string{ReleaserOverreach, FailurePolicyPath + " (Fail -> Ignore, " + NotRestored + ")"}},
		{Name: "the release identity changes the other webhook's failurePolicy", Actor: Releaser, Managed: true, Old: Healthy, Edit: setPolicy(OtherWebhook, admissionregistrationv1.Ignore), Override: OverridePresent, WantAllowed: false, WantMessageContains: []string{ReleaserOverreach, OtherIgnoreSet}},
		{Name: "the release identity changes the failurePolicy of an unmanaged configuration", Actor: Releaser, Managed: false, Old: Healthy, Edit: setPolicy(ManagedWebhook, admissionregistrationv1.Ignore), Override: OverrideAbsent, WantAllowed: true},

		// Webhooks that are not approved targets: their bypass marker and
		// failurePolicy are left to administrators, and the breaker and the
		// release identity may change neither, even with the override.
		{Name: "the breaker adds a bypass marker to a webhook that is not an approved target", Actor: Breaker, Managed: true, Old: Healthy, Edit: addOtherMarker, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, OtherMarkerAdded}},
		{Name: "the breaker opens a circuit and adds a bypass marker to a webhook that is not an approved target", Actor: Breaker, Managed: true, Old: Healthy, Edit: all(openBypass, addOtherMarker), Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, OtherMarkerAdded}},
		{Name: "the breaker removes the bypass marker from a webhook that is not an approved target", Actor: Breaker, Managed: true, Old: OtherBypassed, Edit: removeOtherMarker, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, OtherMarkerRemoved}},
		{Name: "the release identity adds a bypass marker to a webhook that is not an approved target with an override", Actor: Releaser, Managed: true, Old: Healthy, Edit: addOtherMarker, Override: OverridePresent, WantAllowed: false, WantMessageContains: []string{ReleaserOverreach, OtherMarkerAdded}},
		{Name: "the release identity restores a circuit and adds a bypass marker to a webhook that is not an approved target", Actor: Releaser, Managed: true, Old: BypassOpen, Edit: all(closeCircuit, armMarking, addOtherMarker), Override: OverridePresent, WantAllowed: false, WantMessageContains: []string{ReleaserOverreach, OtherMarkerAdded}},
		{Name: "the release identity sets Ignore on a webhook that is not an approved target while restoring a circuit", Actor: Releaser, Managed: true, Old: BypassOpen, Edit: all(closeCircuit, setPolicy(OtherWebhook, admissionregistrationv1.Ignore)), Override: OverridePresent, WantAllowed: false, WantMessageContains: []string{ReleaserOverreach, OtherIgnoreSet}},
		{Name: "an admin adds a bypass marker to a webhook that is not an approved target with an override", Actor: Admin, Managed: true, Old: Healthy, Edit: addOtherMarker, Override: OverridePresent, WantAllowed: true},
		{Name: "another service account removes the bypass marker from a webhook that is not an approved target with an override", Actor: OtherSA, Managed: true, Old: OtherBypassed, Edit: removeOtherMarker, Override: OverridePresent, WantAllowed: true},
		{Name: "an admin removes the bypass marker from a webhook that is not an approved target", Actor: Admin, Managed: true, Old: OtherBypassed, Edit: removeOtherMarker, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(OtherMarkerRemoved)},

		// The release identity and the circuit record: it removes entries
		// and never adds or changes one, so the original a later write
		// restores is one the breaker (or an administrator) wrote.
		{Name: "the release identity writes a record on a healthy configuration with an override", Actor: Releaser, Managed: true, Old: Healthy, Edit: forgeOriginal, Override: OverridePresent, WantAllowed: false, WantMessageContains: []string{ReleaserOverreach, CircuitPath + " (added, " + OnlyRemovesEntries + ")"}},
		{Name: "the release identity changes a record entry's original with an override", Actor: Releaser, Managed: true, Old: ClosedWithRecord, Edit: forgeOriginal, Override: OverridePresent, WantAllowed: false, WantMessageContains: []string{ReleaserOverreach, CircuitPath + " (changed, " + OnlyRemovesEntries + ")"}},
		{Name: "the release identity changes a record entry's original, spaced so that no entry pattern finds it", Actor: Releaser, Managed: true, Old: ClosedWithRecord, Edit: forgeSpacedOriginal, Override: OverridePresent, WantAllowed: false, WantMessageContains: []string{ReleaserOverreach, CircuitPath + " (changed, " + OnlyRemovesEntries + ")"}},
		{Name: "the release identity adds a record entry beside the stored one", Actor: Releaser, Managed: true, Old: IgnoreOpen, Edit: addEntry, Override: OverridePresent, WantAllowed: false, WantMessageContains: []string{ReleaserOverreach, CircuitPath + " (changed, " + OnlyRemovesEntries + ")"}},
		{Name: "the release identity restores one webhook and keeps the other record entry", Actor: Releaser, Managed: true, Old: TwoOpen, Edit: releaseManagedOnly, Override: OverridePresent, WantAllowed: true},
		// The second write of a forged original: admitted, for the rule
		// cannot tell this record from one the breaker wrote; the first
		// write, which would have written it, is refused above.
		{Name: "the release identity puts back Ignore, the original its stored record holds", Actor: Releaser, Managed: true, Old: ForgedOriginal, Edit: setPolicy(ManagedWebhook, admissionregistrationv1.Ignore), Override: OverridePresent, WantAllowed: true},

		// Handed-off entries: an original leaves the record only in the
		// write that puts it back, or by an administrator's hand.
		{Name: "the breaker hands off an open circuit, keeping its entry", Actor: Breaker, Managed: true, Old: Overridden, Edit: handOff, Override: OverridePresent, WantAllowed: true},
		{Name: "the breaker drops a handed-off entry under the override", Actor: Breaker, Managed: true, Old: HandedOff, Edit: removeRecord, Override: OverridePresent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, KeptOriginal}},
		{Name: "the breaker drops a handed-back entry without restoring its original", Actor: Breaker, Managed: true, Old: HandedBack, Edit: removeRecord, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, KeptOriginal}},
		{Name: "the breaker closes a handed-back circuit, restoring its original", Actor: Breaker, Managed: true, Old: HandedBack, Edit: closeCircuit, Override: OverrideAbsent, WantAllowed: true},
		{Name: "the breaker rewrites a handed-back entry's original", Actor: Breaker, Managed: true, Old: HandedBack, Edit: forgeHandedOffOriginal, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: []string{BreakerOverreach, KeptOriginal}},
		{Name: "the breaker signs a handed-off entry anew", Actor: Breaker, Managed: true, Old: HandedOff, Edit: resignHandedOff, Override: OverridePresent, WantAllowed: true},
		{Name: "the release identity drops a handed-off entry without restoring its original", Actor: Releaser, Managed: true, Old: HandedOff, Edit: removeRecord, Override: OverridePresent, WantAllowed: false, WantMessageContains: []string{ReleaserOverreach, KeptOriginal}},
		{Name: "the release identity restores a handed-off circuit from its kept original", Actor: Releaser, Managed: true, Old: HandedOff, Edit: closeCircuit, Override: OverridePresent, WantAllowed: true},
		{Name: "an admin drops a handed-off entry to keep the current value", Actor: Admin, Managed: true, Old: HandedOff, Edit: removeRecord, Override: OverridePresent, WantAllowed: true},
		{Name: "an admin drops a handed-back entry without the override", Actor: Admin, Managed: true, Old: HandedBack, Edit: removeRecord, Override: OverrideAbsent, WantAllowed: false, WantMessageContains: want(CircuitPath)},

		// Unmanaged configurations.
		{Name: "an admin changes the failurePolicy of an unmanaged configuration", Actor: Admin, Managed: false, Old: Healthy, Edit: setPolicy(ManagedWebhook, admissionregistrationv1.Ignore), Override: OverrideAbsent, WantAllowed: true},
		{Name: "another service account forges a circuit record on an unmanaged configuration", Actor: OtherSA, Managed: false, Old: Healthy, Edit: openBypass, Override: OverrideAbsent, WantAllowed: true},
		{Name: "an admin closes a circuit by hand on an unmanaged configuration", Actor: Admin, Managed: false, Old: BypassOpen, Edit: closeCircuit, Override: OverrideEmpty, WantAllowed: true},
	}
}
