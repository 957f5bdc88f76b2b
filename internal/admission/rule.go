package admission

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
)

// CircuitAnnotation is the annotation in which the breaker records, per
// webhook name, the circuit it opened on a MutatingWebhookConfiguration.
const CircuitAnnotation = "webhook-guard.io/circuit"

// OverrideAnnotation is the annotation with which an administrator hands a
// managed configuration over: a non-empty value (the reason) on the new
// object lets anyone change the owned fields.
const OverrideAnnotation = "webhook-guard.io/override"

// BypassMatchConditionName is the name of the matchCondition the breaker adds
// to a webhook in Bypass mode.
const BypassMatchConditionName = "webhook-guard.io/circuit-open"

// BypassMatchConditionExpression is the CEL expression of the bypass
// matchCondition: it never matches, so the webhook is never called.
const BypassMatchConditionExpression = "false"

// DefaultBreakerUsername is the breaker's identity when Options.BreakerUsername
// is empty: the service account of the default installation.
const DefaultBreakerUsername = "system:serviceaccount:webhook-guard-system:webhook-guard"

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
)

// Options configures the ownership rule.
type Options struct {
	// BreakerUsername is the identity allowed to change owned fields (from
	// SelfSubjectReview at runtime). Empty means DefaultBreakerUsername.
	BreakerUsername string
	// Managed maps MWC name -> managed webhook names in it. A configuration
	// is managed when its name is a key, even with an empty list: its bypass
	// markers and circuit annotation are then still owned.
	Managed map[string][]string
}

// Breaker returns the effective breaker username: BreakerUsername, or
// DefaultBreakerUsername when it is empty.
func (o Options) Breaker() string {
	if o.BreakerUsername == "" {
		return DefaultBreakerUsername
	}
	return o.BreakerUsername
}

// ConfigNames returns the managed configuration names, sorted.
func (o Options) ConfigNames() []string {
	names := make([]string, 0, len(o.Managed))
	for name := range o.Managed {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Request is one admission request for a MutatingWebhookConfiguration.
type Request struct {
	// Operation is CREATE, UPDATE, DELETE or CONNECT.
	Operation admissionv1.Operation
	// Old is the stored object (nil on CREATE); New is the object being
	// written (nil on DELETE).
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
	// Message is a human message, set when denied; a single paragraph.
	Message string
	// Warnings are returned to the client and do not block.
	Warnings []string
}

// fieldChange is one change to an owned field.
type fieldChange struct {
	path    string
	webhook string // empty for the circuit annotation
	detail  string
}

// Decide applies the ownership rule to one request.
//
// On a managed configuration (its name is a key of opts.Managed), a CREATE or
// UPDATE is denied when it changes a managed webhook's failurePolicy, adds,
// removes or alters the bypass matchCondition on any webhook, or adds,
// changes or removes the circuit annotation; unless the user is the breaker
// or the new object carries a non-empty override annotation. Everything else
// is allowed.
func Decide(req Request, opts Options) Decision {
	switch req.Operation {
	case admissionv1.Create, admissionv1.Update:
	default:
		return Decision{Allowed: true, Reason: ReasonNotGuarded}
	}
	if req.New == nil {
		return Decision{
			Reason:  ReasonInvalidRequest,
			Message: fmt.Sprintf("%s request for a mutatingwebhookconfiguration carries no object", req.Operation),
		}
	}
	name := req.New.Name
	managedHooks, managed := opts.Managed[name]
	if !managed {
		return Decision{Allowed: true, Reason: ReasonUnmanaged}
	}

	old := req.Old
	if req.Operation == admissionv1.Create {
		old = nil
	}
	changes := ownedChanges(old, req.New, managedHooks)
	record := parseRecord(old)
	isBreaker := req.User.Username == opts.Breaker()
	override := req.New.Annotations[OverrideAnnotation] != ""

	var warnings []string
	if override {
		warnings = append(warnings, oneLine(fmt.Sprintf(
			"mutatingwebhookconfiguration %q carries %s=%q: webhook-guard has handed this configuration over; remove the annotation to return it",
			name, OverrideAnnotation, req.New.Annotations[OverrideAnnotation])))
	}

	switch {
	case len(changes) == 0:
		if !isBreaker {
			warnings = append(warnings, openCircuitWarnings(name, old, req.New, managedHooks, record)...)
		}
		return Decision{Allowed: true, Reason: ReasonAllowed, Warnings: warnings}
	case isBreaker:
		return Decision{Allowed: true, Reason: ReasonBreakerIdentity, Warnings: warnings}
	case override:
		return Decision{Allowed: true, Reason: ReasonOverride, Warnings: warnings}
	}
	return Decision{
		Allowed:  false,
		Reason:   ReasonOwnedFieldChanged,
		Message:  oneLine(denyMessage(name, req.User.Username, opts.Breaker(), changes, record, old)),
		Warnings: warnings,
	}
}

// oneLine replaces control characters (which may come from the circuit
// record or the username) with spaces, so a message stays one paragraph.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// ownedChanges lists the owned fields that differ between old (nil on
// CREATE) and new, in the order the CEL rendering lists them.
func ownedChanges(old, new *admissionregistrationv1.MutatingWebhookConfiguration, managedHooks []string) []fieldChange {
	var oldHooks, newHooks []admissionregistrationv1.MutatingWebhook
	if old != nil {
		oldHooks = old.Webhooks
	}
	newHooks = new.Webhooks

	var changes []fieldChange

	// failurePolicy of managed webhooks present on both sides, in old order.
	for i := range oldHooks {
		o := &oldHooks[i]
		if !contains(managedHooks, o.Name) {
			continue
		}
		n := findHook(newHooks, o.Name)
		if n == nil {
			continue
		}
		of, nf := policyString(o.FailurePolicy), policyString(n.FailurePolicy)
		if of != nf {
			changes = append(changes, fieldChange{
				path:    fmt.Sprintf("webhooks[name=%s].failurePolicy", o.Name),
				webhook: o.Name,
				detail:  fmt.Sprintf("%s -> %s", displayPolicy(of), displayPolicy(nf)),
			})
		}
	}

	// Bypass marker on any webhook: new webhooks in order, then old-only ones.
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
		var detail string
		switch {
		case !ook:
			detail = fmt.Sprintf("added with expression %q", ne)
		case !nok:
			detail = "removed"
		default:
			detail = fmt.Sprintf("expression %q -> %q", oe, ne)
		}
		changes = append(changes, fieldChange{
			path:    fmt.Sprintf("webhooks[name=%s].matchConditions[name=%s]", hook, BypassMatchConditionName),
			webhook: hook,
			detail:  detail,
		})
	}

	// The circuit annotation.
	var oldAnn map[string]string
	if old != nil {
		oldAnn = old.Annotations
	}
	ov, ook := oldAnn[CircuitAnnotation]
	nv, nok := new.Annotations[CircuitAnnotation]
	if ook != nok || ov != nv {
		detail := "changed"
		switch {
		case !ook:
			detail = "added"
		case !nok:
			detail = "removed"
		}
		changes = append(changes, fieldChange{
			path:   fmt.Sprintf("metadata.annotations[%s]", CircuitAnnotation),
			detail: detail,
		})
	}
	return changes
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

// marker returns the expression of the first bypass matchCondition of hook.
func marker(hook *admissionregistrationv1.MutatingWebhook) (string, bool) {
	if hook == nil {
		return "", false
	}
	for _, c := range hook.MatchConditions {
		if c.Name == BypassMatchConditionName {
			return c.Expression, true
		}
	}
	return "", false
}

// policyString maps nil to "", as the CEL rendering does; nil and "Fail" are
// different values.
func policyString(p *admissionregistrationv1.FailurePolicyType) string {
	if p == nil {
		return ""
	}
	return string(*p)
}

func displayPolicy(p string) string {
	if p == "" {
		return "unset"
	}
	return p
}

// circuitEntry is the part of a breaker record entry that admission reads.
type circuitEntry struct {
	Mode                  string  `json:"mode"`
	OpenedAt              string  `json:"openedAt"`
	Reason                string  `json:"reason"`
	OriginalFailurePolicy *string `json:"originalFailurePolicy"`
}

// circuitRecord is the leniently decoded circuit annotation of the old object.
type circuitRecord struct {
	present  bool
	readable bool
	entries  map[string]json.RawMessage
}

func parseRecord(old *admissionregistrationv1.MutatingWebhookConfiguration) circuitRecord {
	if old == nil {
		return circuitRecord{}
	}
	raw, ok := old.Annotations[CircuitAnnotation]
	if !ok {
		return circuitRecord{}
	}
	rec := circuitRecord{present: true}
	if err := json.Unmarshal([]byte(raw), &rec.entries); err == nil && rec.entries != nil {
		rec.readable = true
	}
	return rec
}

// note describes the circuit the record holds for hook, or "" if none.
func (r circuitRecord) note(hook string) string {
	if !r.readable {
		return ""
	}
	raw, ok := r.entries[hook]
	if !ok {
		return ""
	}
	var e circuitEntry
	if err := json.Unmarshal(raw, &e); err != nil {
		return fmt.Sprintf("webhooks[name=%s]: its entry in the circuit record (%s) is unreadable", hook, CircuitAnnotation)
	}
	openedAt := e.OpenedAt
	if openedAt == "" {
		openedAt = "an unrecorded time"
	}
	original := "unset (defaults to Fail)"
	if e.OriginalFailurePolicy != nil && *e.OriginalFailurePolicy != "" {
		original = *e.OriginalFailurePolicy
	}
	s := fmt.Sprintf("webhooks[name=%s]: circuit open since %s, original failurePolicy %s", hook, openedAt, original)
	var extra []string
	if e.Mode != "" {
		extra = append(extra, "mode "+e.Mode)
	}
	if e.Reason != "" {
		extra = append(extra, "reason "+e.Reason)
	}
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, ", ") + ")"
	}
	return s
}

// hooks returns the webhook names in a readable record, sorted.
func (r circuitRecord) hooks() []string {
	names := make([]string, 0, len(r.entries))
	for name := range r.entries {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// AnnotateCommand returns the kubectl command that hands configuration name
// over to its administrators. overwrite adds --overwrite, needed when the
// stored object already carries the annotation (for example with an empty
// value).
func AnnotateCommand(name string, overwrite bool) string {
	cmd := fmt.Sprintf(`kubectl annotate mutatingwebhookconfiguration %s %s="<reason>"`, name, OverrideAnnotation)
	if overwrite {
		cmd += " --overwrite"
	}
	return cmd
}

func denyMessage(name, username, breaker string, changes []fieldChange, record circuitRecord, old *admissionregistrationv1.MutatingWebhookConfiguration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "mutatingwebhookconfiguration %q: user %q may not change fields owned by webhook-guard (%s): ", name, username, breaker)
	parts := make([]string, 0, len(changes))
	var hooks []string
	annotationChanged := false
	for _, c := range changes {
		parts = append(parts, fmt.Sprintf("%s (%s)", c.path, c.detail))
		if c.webhook == "" {
			annotationChanged = true
		} else if !contains(hooks, c.webhook) {
			hooks = append(hooks, c.webhook)
		}
	}
	b.WriteString(strings.Join(parts, ", "))
	b.WriteString(".")

	if record.present && !record.readable {
		fmt.Fprintf(&b, " The circuit record (%s) on the stored configuration is unreadable.", CircuitAnnotation)
	}
	if record.readable && annotationChanged {
		for _, h := range record.hooks() {
			if !contains(hooks, h) {
				hooks = append(hooks, h)
			}
		}
	}
	var notes []string
	for _, h := range hooks {
		if n := record.note(h); n != "" {
			notes = append(notes, n)
		}
	}
	if len(notes) > 0 {
		b.WriteString(" ")
		b.WriteString(strings.Join(notes, "; "))
		b.WriteString(".")
	}

	overwrite := false
	if old != nil {
		_, overwrite = old.Annotations[OverrideAnnotation]
	}
	fmt.Fprintf(&b, " To hand this configuration over, run: %s and retry; remove the annotation to give it back to webhook-guard.",
		AnnotateCommand(name, overwrite))
	return b.String()
}

// openCircuitWarnings warns when a managed webhook with an open circuit has
// fields changed that webhook-guard does not own.
func openCircuitWarnings(name string, old, new *admissionregistrationv1.MutatingWebhookConfiguration, managedHooks []string, record circuitRecord) []string {
	if old == nil || !record.readable {
		return nil
	}
	var warnings []string
	for i := range new.Webhooks {
		n := &new.Webhooks[i]
		if !contains(managedHooks, n.Name) {
			continue
		}
		if _, open := record.entries[n.Name]; !open {
			continue
		}
		o := findHook(old.Webhooks, n.Name)
		if o == nil {
			continue
		}
		fields := changedUnownedFields(o, n)
		if len(fields) == 0 {
			continue
		}
		note := record.note(n.Name)
		if note == "" {
			note = fmt.Sprintf("webhooks[name=%s]: circuit open", n.Name)
		}
		warnings = append(warnings, oneLine(fmt.Sprintf(
			"mutatingwebhookconfiguration %q: %s; your change to %s is allowed, but webhook-guard still owns this webhook's failurePolicy while the circuit is open",
			name, note, strings.Join(fields, ", "))))
	}
	return warnings
}

// changedUnownedFields names the fields, other than the owned ones, that
// differ between two versions of a webhook.
func changedUnownedFields(o, n *admissionregistrationv1.MutatingWebhook) []string {
	var fields []string
	check := func(field string, a, b any) {
		if !jsonEqual(a, b) {
			fields = append(fields, field)
		}
	}
	check("clientConfig", o.ClientConfig, n.ClientConfig)
	check("rules", o.Rules, n.Rules)
	check("timeoutSeconds", o.TimeoutSeconds, n.TimeoutSeconds)
	check("namespaceSelector", o.NamespaceSelector, n.NamespaceSelector)
	check("objectSelector", o.ObjectSelector, n.ObjectSelector)
	check("matchPolicy", o.MatchPolicy, n.MatchPolicy)
	check("sideEffects", o.SideEffects, n.SideEffects)
	check("reinvocationPolicy", o.ReinvocationPolicy, n.ReinvocationPolicy)
	check("admissionReviewVersions", o.AdmissionReviewVersions, n.AdmissionReviewVersions)
	check("matchConditions", withoutMarker(o.MatchConditions), withoutMarker(n.MatchConditions))
	return fields
}

func withoutMarker(conds []admissionregistrationv1.MatchCondition) []admissionregistrationv1.MatchCondition {
	var out []admissionregistrationv1.MatchCondition
	for _, c := range conds {
		if c.Name != BypassMatchConditionName {
			out = append(out, c)
		}
	}
	return out
}

// jsonEqual compares two values by their JSON encodings, so that nil and
// empty collections are equal as they are on the wire.
func jsonEqual(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	if errA != nil || errB != nil {
		return false
	}
	return emptyJSON(string(ja)) == emptyJSON(string(jb))
}

func emptyJSON(s string) string {
	switch s {
	case "null", "[]", "{}":
		return ""
	}
	return s
}
