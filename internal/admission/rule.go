package admission

import (
	"encoding/json"
	"fmt"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// Machine-readable reasons reported in Decision.Reason.
const (
	// ReasonAllowed is reported when a managed configuration is written
	// without touching an owned field.
	ReasonAllowed = "Allowed"
	// ReasonUnmanaged is reported for configurations that are not managed.
	ReasonUnmanaged = "Unmanaged"
	// ReasonNotGuarded is reported for operations the rule does not guard
	// (DELETE, CONNECT).
	ReasonNotGuarded = "OperationNotGuarded"
	// ReasonBreakerIdentity is reported when the breaker changes owned fields.
	ReasonBreakerIdentity = "BreakerIdentity"
	// ReasonOverride is reported when owned fields change on a configuration
	// that carries a non-empty override annotation.
	ReasonOverride = "Override"
	// ReasonOwnedFieldChanged is reported when a request is denied because it
	// changes owned fields.
	ReasonOwnedFieldChanged = "OwnedFieldChanged"
	// ReasonInvalidRequest is reported (and the request denied) when a CREATE
	// or UPDATE carries no new object.
	ReasonInvalidRequest = "InvalidRequest"
	// ReasonBreakerOutsideOwnedFields is reported when the breaker's own
	// identity changes anything but the owned fields of a managed
	// configuration: its token may repoint no webhook, switch off none
	// that is not an approved target (its failurePolicy or bypass
	// matchCondition), and change no metadata but its record (no label,
	// other annotation, owner reference or finalizer).
	ReasonBreakerOutsideOwnedFields = "BreakerOutsideOwnedFields"
	// ReasonReleaserOutsideOwnedFields is reported when the release
	// identity (Options.Releaser) creates a managed configuration, or
	// updates one beyond what a release changes: the owned fields (a
	// managed webhook's failurePolicy only back to its record's
	// originalFailurePolicy; the circuit record only by removing
	// entries), the arming annotation and the override annotation. Its
	// token may repoint no webhook, add or remove none, switch off none
	// that is not an approved target, write no original into the record,
	// and change no other metadata.
	ReasonReleaserOutsideOwnedFields = "ReleaserOutsideOwnedFields"
)

// Request is one admission request for a webhook configuration.
type Request struct {
	// Kind is the configuration's kind; empty means Mutating.
	Kind circuit.Kind
	// Operation is CREATE, UPDATE, DELETE or CONNECT.
	Operation admissionv1.Operation
	// Old is the stored object (nil on CREATE); New is the object being
	// written (nil on DELETE). A ValidatingWebhookConfiguration is given as
	// its circuit.View.
	Old, New *admissionregistrationv1.MutatingWebhookConfiguration
	// User is the requesting user.
	User authenticationv1.UserInfo
}

// Decision is the outcome of Decide.
type Decision struct {
	// Allowed reports whether the request is admitted.
	Allowed bool
	// Reason is a machine reason, one of the Reason* constants.
	Reason string
	// Message is a human message, set when denied; a single line, the same
	// words the ValidatingAdmissionPolicy renders.
	Message string
}

// Decide applies the ownership rule to one request.
//
// On a managed configuration (its name is a key of opts.Managed, or of
// opts.ManagedValidating for a validating one), a CREATE or
// UPDATE is denied when it changes a managed webhook's failurePolicy, adds,
// removes or alters the bypass matchCondition on any webhook, or adds,
// changes or removes the circuit annotation; unless the user is the breaker
// or the new object carries a non-empty override annotation. An UPDATE by
// the breaker is denied when it changes anything else (unownedChanges): any
// other webhook field, and any metadata but the circuit annotation and the
// arming annotation; or when it changes the failurePolicy or the bypass
// matchCondition of a webhook that is not managed (unapprovedChanges). The
// release identity (opts.Releaser(), when it is not the breaker) may create
// no managed configuration, and its UPDATE is denied, with the override
// or without, when it changes anything else but the override annotation
// too, changes the failurePolicy or the bypass matchCondition of a webhook
// that is not managed, changes a managed webhook's failurePolicy to
// anything but the originalFailurePolicy of the webhook's entry in the
// stored record, or writes a circuit record that is not the stored one
// with entries removed (releaserChanges); its owned-field changes still
// need the override. Neither the breaker nor the release identity may
// change or drop a handed-off entry of the stored record but in a write
// that puts its original back (keptOriginals). Everything else is allowed.
func Decide(req Request, opts Options) Decision {
	switch req.Operation {
	case admissionv1.Create, admissionv1.Update:
	default:
		return Decision{Allowed: true, Reason: ReasonNotGuarded}
	}
	kind := req.Kind
	if kind == "" {
		kind = circuit.KindMutating
	}
	if req.New == nil {
		return Decision{
			Reason:  ReasonInvalidRequest,
			Message: fmt.Sprintf("%s request for a %s carries no object", req.Operation, kind.Singular()),
		}
	}
	name := req.New.Name
	if _, managed := opts.managed(kind)[name]; !managed {
		return Decision{Allowed: true, Reason: ReasonUnmanaged}
	}
	old := req.Old
	if req.Operation == admissionv1.Create {
		old = nil
	}
	managedHooks := opts.managedWebhooks(kind, name)
	changes := ownedChanges(old, req.New, managedHooks)
	isBreaker := req.User.Username == opts.Breaker()
	isReleaser := !isBreaker && req.User.Username == opts.Releaser()
	if isBreaker && old != nil {
		if other := breakerChanges(old, req.New, managedHooks); len(other) > 0 {
			return Decision{
				Reason:  ReasonBreakerOutsideOwnedFields,
				Message: breakerDenial(kind, name, opts.Breaker(), other),
			}
		}
	}
	if isReleaser {
		var other []string
		if old != nil {
			other = releaserChanges(old, req.New, managedHooks)
		}
		if old == nil || len(other) > 0 {
			return Decision{
				Reason:  ReasonReleaserOutsideOwnedFields,
				Message: releaserDenial(kind, name, opts.Releaser(), other),
			}
		}
	}
	switch {
	case len(changes) == 0:
		return Decision{Allowed: true, Reason: ReasonAllowed}
	case isBreaker:
		return Decision{Allowed: true, Reason: ReasonBreakerIdentity}
	case req.New.Annotations[circuit.OverrideAnnotation] != "":
		return Decision{Allowed: true, Reason: ReasonOverride}
	}
	return Decision{
		Allowed: false,
		Reason:  ReasonOwnedFieldChanged,
		Message: denial{
			kind:          kind,
			configuration: name,
			username:      req.User.Username,
			breaker:       opts.Breaker(),
			changes:       changes,
			notes:         openNotes(old, managedHooks),
			overwrite:     hasAnnotation(old, circuit.OverrideAnnotation),
		}.message(),
	}
}

// ownedChanges lists the owned fields that differ between old (nil on
// CREATE) and new, each as "path (what happened)", in the order the CEL
// rendering lists them: managed failurePolicies in old order, bypass markers
// (new webhooks in order, then removed ones; the marker of a webhook that
// is not managed with notApproved), then the circuit annotation.
func ownedChanges(old, new *admissionregistrationv1.MutatingWebhookConfiguration, managedHooks []string) []string {
	var oldHooks []admissionregistrationv1.MutatingWebhook
	if old != nil {
		oldHooks = old.Webhooks
	}
	newHooks := new.Webhooks
	var changes []string

	for i := range oldHooks {
		o := &oldHooks[i]
		n := findHook(newHooks, o.Name)
		if !contains(managedHooks, o.Name) || n == nil {
			continue
		}
		if of, nf := circuit.PolicyString(o.FailurePolicy), circuit.PolicyString(n.FailurePolicy); of != nf {
			changes = append(changes, fmt.Sprintf("%s (%s -> %s)", failurePolicyPath(o.Name), of, nf))
		}
	}

	names := make([]string, 0, len(newHooks)+len(oldHooks))
	for i := range newHooks {
		names = append(names, newHooks[i].Name)
	}
	for i := range oldHooks {
		if findHook(newHooks, oldHooks[i].Name) == nil {
			names = append(names, oldHooks[i].Name)
		}
	}
	for _, hook := range names {
		oe, ook := marker(findHook(oldHooks, hook))
		ne, nok := marker(findHook(newHooks, hook))
		if ook == nok && oe == ne {
			continue
		}
		change := changeVerb(ook, nok)
		if !contains(managedHooks, hook) {
			change += ", " + notApproved
		}
		changes = append(changes, fmt.Sprintf("%s (%s)", bypassPath(hook), change))
	}

	ov, ook := annotation(old, circuit.Annotation)
	nv, nok := annotation(new, circuit.Annotation)
	if ook != nok || ov != nv {
		changes = append(changes, fmt.Sprintf("%s (%s)", circuitPath, changeVerb(ook, nok)))
	}
	return changes
}

// breakerChanges lists what an UPDATE by the breaker changes beyond what
// it owns, in the order the CEL rendering lists them: unownedChanges, then
// unapprovedChanges.
func breakerChanges(old, new *admissionregistrationv1.MutatingWebhookConfiguration, managedHooks []string) []string {
	return append(append(unownedChanges(old, new), unapprovedChanges(old, new, managedHooks)...), keptOriginals(old, new)...)
}

// keepsOriginal ends, in a denial of the breaker or the release identity,
// each handed-off entry it changes or removes without putting its
// original back.
const keepsOriginal = "handed off: it keeps its original until a write puts that back, or an administrator removes it"

// keptOriginals lists the handed-off entries of the stored record (those
// with circuit.FactHandedOffAt), of webhooks present in old, in old order, that an UPDATE changes or
// removes, as "metadata.annotations[record] entry W (keepsOriginal)". An
// entry is kept when the new record holds it with the same original and
// handoff time (its signer may change: a takeover signs it anew), and may
// go only in a write where W is gone or its failurePolicy is back at the
// original (restores). Neither the breaker nor the release identity may
// otherwise drop the last copy of an original: only an administrator,
// with the override, may.
func keptOriginals(old, new *admissionregistrationv1.MutatingWebhookConfiguration) []string {
	record, _ := annotation(old, circuit.Annotation)
	newRecord, _ := annotation(new, circuit.Annotation)
	var out []string
	for i := range old.Webhooks {
		name := old.Webhooks[i].Name
		entry := circuit.EntryText(record, name)
		if entry == "" || circuit.FactHandedOffAt.Read(entry) == "" {
			continue
		}
		if kept := circuit.EntryText(newRecord, name); kept != "" {
			if circuit.FactOriginalFailurePolicy.Read(kept) == circuit.FactOriginalFailurePolicy.Read(entry) &&
				circuit.FactHandedOffAt.Read(kept) == circuit.FactHandedOffAt.Read(entry) {
				continue
			}
		} else if n := findHook(new.Webhooks, name); n == nil || restores(record, name, circuit.PolicyString(n.FailurePolicy)) {
			continue
		}
		out = append(out, fmt.Sprintf("%s entry %s (%s)", circuitPath, name, keepsOriginal))
	}
	return out
}

// unownedChanges lists what an UPDATE changes besides the owned fields and
// the failurePolicy and bypass marker of any webhook, in the order the CEL
// rendering lists them: the labels, the annotations other than the circuit
// record, the arming entries and the keys of alsoAllowed, the other
// metadata the breaker may not change (breakerMetadata), the webhooks'
// names and order, then each webhook (in new order) whose other fields
// differ (unowned). Fields are compared as the apiserver stores them
// (JSON, an absent field differs from a present one), which is how CEL
// sees them.
func unownedChanges(old, new *admissionregistrationv1.MutatingWebhookConfiguration, alsoAllowed ...string) []string {
	var out []string
	if !jsonEqual(old.Labels, new.Labels) {
		out = append(out, "metadata.labels")
	}
	without := func(m map[string]string) map[string]string {
		c := map[string]string{}
		for k, v := range m {
			if k != circuit.Annotation && k != circuit.ArmingAnnotation && !slices.Contains(alsoAllowed, k) {
				c[k] = v
			}
		}
		return c
	}
	if !jsonEqual(without(old.Annotations), without(new.Annotations)) {
		out = append(out, "metadata.annotations")
	}
	for _, f := range breakerMetadata {
		if !jsonEqual(f.value(&old.ObjectMeta), f.value(&new.ObjectMeta)) {
			out = append(out, f.change())
		}
	}
	names := func(hooks []admissionregistrationv1.MutatingWebhook) []string {
		n := make([]string, 0, len(hooks))
		for i := range hooks {
			n = append(n, hooks[i].Name)
		}
		return n
	}
	if !slices.Equal(names(old.Webhooks), names(new.Webhooks)) {
		out = append(out, "webhooks (added, removed or reordered)")
	}
	for i := range new.Webhooks {
		n := &new.Webhooks[i]
		o := findHook(old.Webhooks, n.Name)
		if o != nil && !jsonEqual(unowned(o), unowned(n)) {
			out = append(out, "webhooks[name="+n.Name+"]")
		}
	}
	return out
}

// notApproved ends, in a denial, each change to the bypass marker or the
// failurePolicy of a webhook that is not an approved target: not one of
// the configuration's managed webhooks.
const notApproved = "not an approved target of webhook-guard"

// unapprovedChanges lists what an UPDATE changes of the failurePolicy and
// the bypass marker of webhooks that are not approved targets (not in
// managedHooks), present on both sides, in the order the CEL rendering
// lists them: the failurePolicy changes, then the bypass marker changes,
// each in new order. The breaker and the release identity may change
// neither: the bypass marker on such a webhook would switch it off with
// no record entry and no Event, and an approval names the webhooks the
// breaker may switch off. Others need the override for a marker
// (ownedChanges) and may set such a webhook's failurePolicy freely.
func unapprovedChanges(old, new *admissionregistrationv1.MutatingWebhookConfiguration, managedHooks []string) []string {
	var policies, markers []string
	for i := range new.Webhooks {
		name := new.Webhooks[i].Name
		o, n := findHook(old.Webhooks, name), findHook(new.Webhooks, name)
		if contains(managedHooks, name) || o == nil {
			continue
		}
		if of, nf := circuit.PolicyString(o.FailurePolicy), circuit.PolicyString(n.FailurePolicy); of != nf {
			policies = append(policies, fmt.Sprintf("%s (%s -> %s, %s)", failurePolicyPath(name), of, nf, notApproved))
		}
		oe, ook := marker(o)
		ne, nok := marker(n)
		if ook != nok || oe != ne {
			markers = append(markers, fmt.Sprintf("%s (%s, %s)", bypassPath(name), changeVerb(ook, nok), notApproved))
		}
	}
	return append(policies, markers...)
}

// releaserChanges lists what an UPDATE by the release identity changes
// beyond what a release changes, in the order the CEL rendering lists
// them: unownedChanges with the override annotation allowed too, then
// unapprovedChanges, unrestoredPolicies and recordBeyondRemoval.
func releaserChanges(old, new *admissionregistrationv1.MutatingWebhookConfiguration, managedHooks []string) []string {
	out := unownedChanges(old, new, circuit.OverrideAnnotation)
	out = append(out, unapprovedChanges(old, new, managedHooks)...)
	out = append(out, unrestoredPolicies(old, new, managedHooks)...)
	out = append(out, recordBeyondRemoval(old, new)...)
	return append(out, keptOriginals(old, new)...)
}

// onlyRemovesEntries ends, in a denial of the release identity, a circuit
// record it adds, or changes other than by removing entries.
const onlyRemovesEntries = "a release only removes entries of the stored record"

// recordBeyondRemoval lists the circuit record, as
// "metadata.annotations[record] (added or changed, onlyRemovesEntries)",
// when an UPDATE adds it, or changes it to anything but the stored record
// with entries removed (circuit.OnlyEntriesOf). The release identity may
// restore a failurePolicy to the original the stored record holds
// (unrestoredPolicies); a record it could write would name an original
// that its next write then "restores", Ignore on a healthy webhook say.
// So every original it restores is one the breaker, or an administrator,
// wrote.
func recordBeyondRemoval(old, new *admissionregistrationv1.MutatingWebhookConfiguration) []string {
	ov, ook := annotation(old, circuit.Annotation)
	nv, nok := annotation(new, circuit.Annotation)
	if !nok || ook && (nv == ov || circuit.OnlyEntriesOf(nv, ov)) {
		return nil
	}
	return []string{fmt.Sprintf("%s (%s, %s)", circuitPath, changeVerb(ook, nok), onlyRemovesEntries)}
}

// notRestored ends, in a denial of the release identity, each managed
// failurePolicy it changes to anything but the record's original.
const notRestored = "not back to the originalFailurePolicy of its circuit record entry"

// unrestoredPolicies lists the managed webhooks, present on both sides, in
// old order as ownedChanges lists them, whose failurePolicy changes to
// anything but what restores it (restores), as
// "webhooks[name=W].failurePolicy (old -> new, notRestored)".
func unrestoredPolicies(old, new *admissionregistrationv1.MutatingWebhookConfiguration, managedHooks []string) []string {
	record, _ := annotation(old, circuit.Annotation)
	var out []string
	for i := range old.Webhooks {
		o := &old.Webhooks[i]
		n := findHook(new.Webhooks, o.Name)
		if !contains(managedHooks, o.Name) || n == nil {
			continue
		}
		of, nf := circuit.PolicyString(o.FailurePolicy), circuit.PolicyString(n.FailurePolicy)
		if of == nf || restores(record, o.Name, nf) {
			continue
		}
		out = append(out, fmt.Sprintf("%s (%s -> %s, %s)", failurePolicyPath(o.Name), of, nf, notRestored))
	}
	return out
}

// restores reports whether failurePolicy policy (as circuit.PolicyString
// names it) is webhook's original in the record text: the record holds
// an entry for it, and policy is the entry's originalFailurePolicy (as
// circuit.FactOriginalFailurePolicy shows it), or Fail, kube-apiserver's
// default, where the entry's original is unset ("guard release" removes
// the field then, and kube-apiserver stores Fail).
func restores(record, webhook, policy string) bool {
	if !circuit.HasEntry(record, webhook) {
		return false
	}
	return circuit.RestoresOriginal(policy, circuit.FactOriginalFailurePolicy.Show(circuit.EntryText(record, webhook)))
}

// metadataField is a field of metadata, besides the labels and the
// annotations, that the breaker's identity may not change.
type metadataField struct {
	// name is the field's name under metadata, as JSON and CEL spell it.
	name string
	// absent is the CEL literal that stands for the field when it is
	// absent: an absent field and an empty one are the same when stored.
	absent string
	// why, when set, says what a change to the field could do; the
	// denial gives it after the field's path.
	why string
	// value returns the field of meta.
	value func(meta *metav1.ObjectMeta) any
}

// change names the field in a denial: its path, and why it matters.
func (f metadataField) change() string {
	if f.why == "" {
		return "metadata." + f.name
	}
	return "metadata." + f.name + " (" + f.why + ")"
}

// breakerMetadata are the metadata fields, besides the labels and the
// annotations, that an UPDATE can change and the breaker's identity may
// not: with the labels and every annotation but the circuit record, all
// the metadata a request can set. The rest is kept by kube-apiserver
// (apiServerMetadata).
var breakerMetadata = []metadataField{
	{
		name: "ownerReferences", absent: "[]",
		why:   "the garbage collector deletes a configuration whose owners are gone",
		value: func(m *metav1.ObjectMeta) any { return m.OwnerReferences },
	},
	{
		name: "finalizers", absent: "[]",
		why:   "a finalizer holds the configuration's deletion until someone removes it",
		value: func(m *metav1.ObjectMeta) any { return m.Finalizers },
	},
	{
		name: "generateName", absent: "''",
		value: func(m *metav1.ObjectMeta) any { return m.GenerateName },
	},
}

// apiServerMetadata are the metadata fields the rule does not compare,
// because kube-apiserver decides them on an UPDATE, before validating
// admission sees it: name, namespace, uid, creationTimestamp,
// deletionTimestamp and deletionGracePeriodSeconds cannot change (update
// validation); generation is kube-apiserver's (rest.BeforeUpdate);
// resourceVersion is the write's precondition, not stored as sent;
// selfLink is never stored; managedFields is server-side apply's
// bookkeeping, which kube-apiserver rewrites on every write, the breaker's
// own included, and which changes no field of the configuration.
var apiServerMetadata = []string{
	"name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
	"generation", "resourceVersion", "selfLink", "managedFields",
}

// unowned is the webhook without its failurePolicy and bypass marker:
// the breaker owns them on a managed webhook, and unapprovedChanges
// decides them on any other.
func unowned(w *admissionregistrationv1.MutatingWebhook) *admissionregistrationv1.MutatingWebhook {
	c := w.DeepCopy()
	c.FailurePolicy = nil
	c.MatchConditions = nil
	for _, mc := range w.MatchConditions {
		if mc.Name != circuit.BypassCondition {
			c.MatchConditions = append(c.MatchConditions, mc)
		}
	}
	return c
}

// jsonEqual compares two values as their JSON encodings: as stored.
func jsonEqual(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(normalizeEmpty(ja)) == string(normalizeEmpty(jb))
}

// normalizeEmpty makes null and an empty map or list equal, as an absent
// map is on the wire.
func normalizeEmpty(b []byte) []byte {
	switch string(b) {
	case "null", "{}", "[]":
		return nil
	}
	return b
}

// openNotes describes, from old's record, each managed webhook whose
// circuit is open.
func openNotes(old *admissionregistrationv1.MutatingWebhookConfiguration, managedHooks []string) []string {
	record, _ := annotation(old, circuit.Annotation)
	var notes []string
	for _, hook := range managedHooks {
		if circuit.HasEntry(record, hook) {
			notes = append(notes, circuit.Note(circuit.EntryText(record, hook), hook))
		}
	}
	return notes
}

// changeVerb says what happened to a value that was (before) and is (after)
// present.
func changeVerb(before, after bool) string {
	switch {
	case !before:
		return "added"
	case !after:
		return "removed"
	}
	return "changed"
}

func annotation(obj *admissionregistrationv1.MutatingWebhookConfiguration, key string) (string, bool) {
	if obj == nil {
		return "", false
	}
	v, ok := obj.Annotations[key]
	return v, ok
}

func hasAnnotation(obj *admissionregistrationv1.MutatingWebhookConfiguration, key string) bool {
	_, ok := annotation(obj, key)
	return ok
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func findHook(hooks []admissionregistrationv1.MutatingWebhook, name string) *admissionregistrationv1.MutatingWebhook {
	for i := range hooks {
		if hooks[i].Name == name {
			return &hooks[i]
		}
	}
	return nil
}

// marker returns the expression of the bypass matchCondition of hook.
func marker(hook *admissionregistrationv1.MutatingWebhook) (string, bool) {
	if hook == nil {
		return "", false
	}
	for _, c := range hook.MatchConditions {
		if c.Name == circuit.BypassCondition {
			return c.Expression, true
		}
	}
	return "", false
}
