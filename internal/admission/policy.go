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
				Expression: ownedMayChange(opts.Breaker(), opts.Releaser()),
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
				Expression:        releaserValidationExpression,
				MessageExpression: onDenial(releaserValidationExpression, releaserDenialCEL(opts.Releaser())),
				Message:           fmt.Sprintf("webhook-guard's release identity (%s) may change only what a release restores", opts.Releaser()),
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
	return "(" + validation + ")\n? '' : " + message
}

// The policy's CEL. Each expression is a constant, written as it appears
// in the rendered policy, one clause a line. Three values depend on Options
// and are filled in when rendering: the breaker's username (isBreaker, the
// matchCondition and the messages), the release identity's (isReleaser,
// the matchCondition and its message) and the managed webhooks
// (managedByResource, celManagedMap). The names package circuit gives the
// record's annotation, the override annotation, the bypass matchCondition
// and an unset failurePolicy are bound once, as the first variables; only
// the matchCondition, which sees no variables, has the record's key filled
// in. Two parts are rendered from Go instead of written here: the metadata
// the breaker may not change (breakerMetadata, which the Go rule reads
// too) and the record's grammar (circuit's *CEL functions, which the
// marking policies share). TestPolicy_CEL_agreesWithGo and
// FuzzRule_CELAgreesWithGo compile the policy offline, as kube-apiserver
// does, and hold it to the Go rule.
//
// A change to any of this text is a change to the rule: record it (see
// recordedRuleFiles) so that the next version's replicas recognise it.

// ownedMayChangeCondition names the policy's matchCondition.
const ownedMayChangeCondition = "owned-fields-may-change"

// ownedMayChangeCEL is the policy's matchCondition: false, so that
// kube-apiserver skips the policy (no variable, validation or message is
// evaluated), only for a request the rule always admits: an UPDATE, not by
// the breaker or the release identity, that keeps the webhooks (equal
// metadata.generation, see webhooksKeptCEL) and the circuit record. Then
// no owned field changes, and only those two identities are limited to
// what they may change. These are most writes to a managed configuration
// (labels, annotations).
//
// A matchCondition sees no variables, so the values are filled in
// (ownedMayChange): %[1]s is the breaker's username, %[3]s the release
// identity's and %[2]s the record's annotation key, bound once to key by a
// list of one element.
const ownedMayChangeCEL = `oldObject == null
  // the breaker: its own writes are limited to the owned fields
  || has(request.userInfo.username) && request.userInfo.username == %[1]s
  // the release identity: its writes are limited to what a release changes
  || has(request.userInfo.username) && request.userInfo.username == %[3]s
  // the webhooks may have changed
  || !has(object.metadata.generation) || !has(oldObject.metadata.generation)
  || object.metadata.generation != oldObject.metadata.generation
  // the circuit record was added, removed or changed
  || [%[2]s].exists(key,
    (has(object.metadata.annotations) && key in object.metadata.annotations)
      != (has(oldObject.metadata.annotations) && key in oldObject.metadata.annotations)
    || has(object.metadata.annotations) && key in object.metadata.annotations
      && object.metadata.annotations[key] != oldObject.metadata.annotations[key])`

// ownedMayChange renders ownedMayChangeCEL for breaker and releaser.
func ownedMayChange(breaker, releaser string) string {
	return fmt.Sprintf(ownedMayChangeCEL, circuit.QuoteCEL(breaker), circuit.QuoteCEL(circuit.Annotation), circuit.QuoteCEL(releaser))
}

// validationExpression admits the request unless it changes owned fields of
// a managed configuration without being the breaker or carrying an override.
// sameOwned with the same circuit record is the common case of no owned
// change, decided without listing the changes. A request of the release
// identity that releaserValidationExpression denies is left to it, so that
// one validation denies and says why, as the Go rule does. Validations
// hold no comment: onDenial copies each into its message expression, where
// a comment on the last line would swallow the closing parenthesis.
const validationExpression = `!variables.isManaged
  || variables.isBreaker
  || variables.isReleaser && (oldObject == null || size(variables.releaserChanges) > 0)
  || variables.override
  || variables.sameOwned && variables.circuit == variables.oldCircuit
  || size(variables.ownedChanges) == 0`

// breakerValidationExpression admits the request unless the breaker's own
// identity updates more than the owned fields of a managed configuration
// (breakerChanges).
const breakerValidationExpression = `!variables.isManaged
  || !variables.isBreaker
  || oldObject == null
  || size(variables.breakerChanges) == 0`

// releaserValidationExpression admits the request unless the release
// identity creates a managed configuration, or updates one beyond what a
// release changes (releaserChanges).
const releaserValidationExpression = `!variables.isManaged
  || !variables.isReleaser
  || oldObject != null && size(variables.releaserChanges) == 0`

// managedVariable names the policy variable that holds the targets: the
// only part of the policy, with the resourceNames, that depends on them.
const managedVariable = "managedByResource"

// managedByConfigCEL: the managed configurations of the request's kind, by
// name, each with its managed webhooks.
const managedByConfigCEL = `request.resource.resource in variables.managedByResource
  ? variables.managedByResource[request.resource.resource]
  : {}`

// managedCEL: the managed webhooks of the request's configuration, [] when
// it is not managed.
const managedCEL = `variables.isManaged
  ? variables.managedByConfig[object.metadata.name]
  : []`

// kindNameCEL: the configuration's kind as kubectl and the messages name
// it (circuit.Kind.Singular), from its resource (circuit.Kind.Resource).
const kindNameCEL = `request.resource.resource == 'validatingwebhookconfigurations'
  ? 'validatingwebhookconfiguration'
  : 'mutatingwebhookconfiguration'`

// annotationsCEL and oldAnnotationsCEL: each side's annotations, {} when
// it has none (oldObject is null on CREATE).
const (
	annotationsCEL = `has(object.metadata.annotations)
  ? object.metadata.annotations
  : {}`
	oldAnnotationsCEL = `oldObject != null && has(oldObject.metadata.annotations)
  ? oldObject.metadata.annotations
  : {}`
)

// overrideCEL: whether the new object carries a non-empty override
// annotation, handing the configuration to its administrators.
const overrideCEL = `variables.overrideKey in variables.annotations
  && variables.annotations[variables.overrideKey] != ''`

// newWebhooksCEL and oldWebhooksCEL: each side's webhooks, [] when it has
// none.
const (
	newWebhooksCEL = `has(object.webhooks)
  ? object.webhooks
  : []`
	oldWebhooksCEL = `oldObject != null && has(oldObject.webhooks)
  ? oldObject.webhooks
  : []`
)

// webhooksKeptCEL: whether kube-apiserver found the webhooks unchanged. It
// sets metadata.generation to 1 on create and, on update, keeps the stored
// one unless the webhooks differ (rest.BeforeUpdate, then the
// configuration strategy's PrepareForUpdate, both before validating
// admission). Equal generations therefore mean equal webhooks: no webhook
// field changed, owned or not, and no variable below needs to walk the
// lists. That is most writes by others (labels, annotations) and the
// breaker's own record updates. An object without a generation (as offline
// evaluations build them) takes the comparisons below.
const webhooksKeptCEL = `oldObject != null
  && has(object.metadata.generation) && has(oldObject.metadata.generation)
  && object.metadata.generation == oldObject.metadata.generation`

// newPoliciesCEL and oldPoliciesCEL: each webhook's failurePolicy, in list
// order, as circuit.PolicyString names it (unsetPolicy when it has none).
const (
	newPoliciesCEL = `variables.newWebhooks.map(w,
  has(w.failurePolicy) && w.failurePolicy != '' ? w.failurePolicy : variables.unsetPolicy)`
	oldPoliciesCEL = `variables.oldWebhooks.map(o,
  has(o.failurePolicy) && o.failurePolicy != '' ? o.failurePolicy : variables.unsetPolicy)`
)

// newMarkersCEL and oldMarkersCEL: each webhook's bypass marker, in list
// order, as a list of zero or one expression (the first matchCondition so
// named).
const (
	newMarkersCEL = `variables.newWebhooks.map(w,
  has(w.matchConditions) && w.matchConditions.exists(c, c.name == variables.bypassName)
    ? [w.matchConditions.filter(c, c.name == variables.bypassName)[0].expression]
    : [])`
	oldMarkersCEL = `variables.oldWebhooks.map(o,
  has(o.matchConditions) && o.matchConditions.exists(c, c.name == variables.bypassName)
    ? [o.matchConditions.filter(c, c.name == variables.bypassName)[0].expression]
    : [])`
)

// sameOwnedCEL: whether no owned field of a webhook changed: the webhooks
// are kept, or have the same names in the same order with the same
// failurePolicies and markers (a caBundle rotation, say). Then the lookups
// by name below are skipped. Comparing these lists of strings is cheaper
// than comparing the webhooks themselves.
const sameOwnedCEL = `variables.webhooksKept
  || variables.oldNames == variables.newNames
    && variables.oldPolicies == variables.newPolicies
    && variables.oldMarkers == variables.newMarkers`

// failurePolicyChangesCEL: managed webhooks, present on both sides, whose
// failurePolicy differs, in old order, as ownedChanges names them. The new
// webhook named o.name is the first one so named, at
// newNames.indexOf(o.name), as the Go rule's findHook finds it: a native
// lookup, not a comprehension.
const failurePolicyChangesCEL = `variables.sameOwned ? [] : variables.oldWebhooks
  .filter(o, o.name in variables.managed && o.name in variables.newNames
    && variables.newPolicies[variables.newNames.indexOf(o.name)]
      != (has(o.failurePolicy) && o.failurePolicy != '' ? o.failurePolicy : variables.unsetPolicy))
  .map(o, 'webhooks[name=' + o.name + '].failurePolicy ('
    + (has(o.failurePolicy) && o.failurePolicy != '' ? o.failurePolicy : variables.unsetPolicy)
    + ' -> ' + variables.newPolicies[variables.newNames.indexOf(o.name)] + ')')`

// bypassChangesCEL: webhooks (new ones in order, then removed ones) whose
// bypass marker was added, removed or altered, as ownedChanges names them,
// with notApproved for a webhook that is not managed. Each side's marker
// of the webhook named n is that of the first one so named, [] when there
// is none.
const bypassChangesCEL = `variables.sameOwned ? [] : (variables.newNames + variables.oldNames.filter(n, !(n in variables.newNames)))
  .filter(n,
    (n in variables.newNames ? variables.newMarkers[variables.newNames.indexOf(n)] : [])
      != (n in variables.oldNames ? variables.oldMarkers[variables.oldNames.indexOf(n)] : []))
  .map(n, 'webhooks[name=' + n + '].matchConditions[name=' + variables.bypassName + '] ('
    + (size(n in variables.oldNames ? variables.oldMarkers[variables.oldNames.indexOf(n)] : []) == 0 ? 'added'
      : size(n in variables.newNames ? variables.newMarkers[variables.newNames.indexOf(n)] : []) == 0 ? 'removed'
      : 'changed')
    + (n in variables.managed ? '' : ', ' + variables.notApproved)
    + ')')`

// circuitCEL and oldCircuitCEL: each side's circuit record, as a list of
// zero or one value.
const (
	circuitCEL = `variables.recordKey in variables.annotations
  ? [variables.annotations[variables.recordKey]]
  : []`
	oldCircuitCEL = `variables.recordKey in variables.oldAnnotations
  ? [variables.oldAnnotations[variables.recordKey]]
  : []`
)

// circuitChangesCEL: the circuit record, when it was added, removed or
// changed, named as circuitPath.
const circuitChangesCEL = `variables.circuit != variables.oldCircuit
  ? ['metadata.annotations[' + variables.recordKey + '] ('
    + (size(variables.oldCircuit) == 0 ? 'added' : size(variables.circuit) == 0 ? 'removed' : 'changed')
    + ')']
  : []`

// ownedChangesCEL: every owned field that changes, as ownedChanges lists
// them in Go.
const ownedChangesCEL = `variables.failurePolicyChanges + variables.bypassChanges + variables.circuitChanges`

// labelsChangedCEL: whether the labels differ; no labels and an empty map
// are the same, as when stored.
const labelsChangedCEL = `(has(object.metadata.labels) ? object.metadata.labels : {})
  != (oldObject != null && has(oldObject.metadata.labels) ? oldObject.metadata.labels : {})`

// annotationsChangedCEL: whether any annotation but the circuit record and
// the marking's arming entries was added, changed or removed.
const annotationsChangedCEL = `variables.annotations.filter(k, k != variables.recordKey && k != variables.armingKey)
    .exists(k, !(k in variables.oldAnnotations) || variables.oldAnnotations[k] != variables.annotations[k])
  || variables.oldAnnotations.filter(k, k != variables.recordKey && k != variables.armingKey)
    .exists(k, !(k in variables.annotations))`

// releaserAnnotationsChangedCEL: annotationsChangedCEL with the override
// annotation allowed too, for the release identity.
const releaserAnnotationsChangedCEL = `variables.annotations.filter(k, k != variables.recordKey && k != variables.armingKey && k != variables.overrideKey)
    .exists(k, !(k in variables.oldAnnotations) || variables.oldAnnotations[k] != variables.annotations[k])
  || variables.oldAnnotations.filter(k, k != variables.recordKey && k != variables.armingKey && k != variables.overrideKey)
    .exists(k, !(k in variables.annotations))`

// webhookSetChangedCEL: whether webhooks were added, removed or reordered.
const webhookSetChangedCEL = `!variables.webhooksKept && variables.oldNames != variables.newNames`

// webhooksChangedCEL: each new webhook whose unowned fields differ from
// those of the first old one of its name (o, bound by a comprehension over
// one element). A field is the same when both lack it or both hold equal
// values. The failurePolicy and the bypass marker of every webhook are
// left out: the breaker owns them on a managed webhook, and
// unapprovedChangesCEL decides them on any other.
const webhooksChangedCEL = `variables.webhooksKept ? [] : variables.newWebhooks
  .filter(w, w.name in variables.oldNames
    && [variables.oldWebhooks[variables.oldNames.indexOf(w.name)]].exists(o, !(o == w
      || has(o.clientConfig) == has(w.clientConfig) && (!has(o.clientConfig) || o.clientConfig == w.clientConfig)
      && has(o.rules) == has(w.rules) && (!has(o.rules) || o.rules == w.rules)
      && has(o.timeoutSeconds) == has(w.timeoutSeconds) && (!has(o.timeoutSeconds) || o.timeoutSeconds == w.timeoutSeconds)
      && has(o.namespaceSelector) == has(w.namespaceSelector) && (!has(o.namespaceSelector) || o.namespaceSelector == w.namespaceSelector)
      && has(o.objectSelector) == has(w.objectSelector) && (!has(o.objectSelector) || o.objectSelector == w.objectSelector)
      && has(o.matchPolicy) == has(w.matchPolicy) && (!has(o.matchPolicy) || o.matchPolicy == w.matchPolicy)
      && has(o.sideEffects) == has(w.sideEffects) && (!has(o.sideEffects) || o.sideEffects == w.sideEffects)
      && has(o.admissionReviewVersions) == has(w.admissionReviewVersions) && (!has(o.admissionReviewVersions) || o.admissionReviewVersions == w.admissionReviewVersions)
      && has(o.reinvocationPolicy) == has(w.reinvocationPolicy) && (!has(o.reinvocationPolicy) || o.reinvocationPolicy == w.reinvocationPolicy)
      // the other matchConditions: the bypass marker is left to ownedChanges and unapprovedChanges
      && (has(o.matchConditions) ? o.matchConditions.filter(c, c.name != variables.bypassName) : [])
        == (has(w.matchConditions) ? w.matchConditions.filter(c, c.name != variables.bypassName) : []))))
  .map(w, 'webhooks[name=' + w.name + ']')`

// unapprovedPoliciesCEL and unapprovedMarkersCEL: the webhooks that are
// not managed, present on both sides, in new order, whose failurePolicy
// (or bypass marker) changes, as unapprovedChanges names them in Go. Each
// side's value of the webhook named n is that of the first one so named.
const (
	unapprovedPoliciesCEL = `variables.sameOwned ? [] : variables.newNames
  .filter(n, !(n in variables.managed) && n in variables.oldNames
    && variables.newPolicies[variables.newNames.indexOf(n)] != variables.oldPolicies[variables.oldNames.indexOf(n)])
  .map(n, 'webhooks[name=' + n + '].failurePolicy (' + variables.oldPolicies[variables.oldNames.indexOf(n)]
    + ' -> ' + variables.newPolicies[variables.newNames.indexOf(n)] + ', ' + variables.notApproved + ')')`
	unapprovedMarkersCEL = `variables.sameOwned ? [] : variables.newNames
  .filter(n, !(n in variables.managed) && n in variables.oldNames
    && variables.newMarkers[variables.newNames.indexOf(n)] != variables.oldMarkers[variables.oldNames.indexOf(n)])
  .map(n, 'webhooks[name=' + n + '].matchConditions[name=' + variables.bypassName + '] ('
    + (size(variables.oldMarkers[variables.oldNames.indexOf(n)]) == 0 ? 'added'
      : size(variables.newMarkers[variables.newNames.indexOf(n)]) == 0 ? 'removed'
      : 'changed')
    + ', ' + variables.notApproved + ')')`
)

// unownedChangesCEL: what else changes, as unownedChanges lists it in Go.
const unownedChangesCEL = `(variables.labelsChanged ? ['metadata.labels'] : [])
  + (variables.annotationsChanged ? ['metadata.annotations'] : [])
  + variables.metadataChanges
  + (variables.webhookSetChanged ? ['webhooks (added, removed or reordered)'] : [])
  + variables.webhooksChanged`

// releaserUnownedChangesCEL: unownedChangesCEL with the override
// annotation allowed, as releaserChanges calls unownedChanges in Go.
const releaserUnownedChangesCEL = `(variables.labelsChanged ? ['metadata.labels'] : [])
  + (variables.releaserAnnotationsChanged ? ['metadata.annotations'] : [])
  + variables.metadataChanges
  + (variables.webhookSetChanged ? ['webhooks (added, removed or reordered)'] : [])
  + variables.webhooksChanged`

// oldRecordCEL: the stored record's text, empty when there is none.
const oldRecordCEL = `size(variables.oldCircuit) == 0
  ? ''
  : variables.oldCircuit[0]`

// policyVariables renders the policy's variables; each may use the ones
// before it. They compute what ownedChanges, unownedChanges,
// unapprovedChanges, releaserChanges and openNotes compute in Go.
func policyVariables(opts Options) []admissionregistrationv1.Variable {
	vars := []struct{ name, expr string }{
		// The names the rule reads, bound once.
		{"recordKey", circuit.QuoteCEL(circuit.Annotation)},
		{"armingKey", circuit.QuoteCEL(circuit.ArmingAnnotation)},
		{"overrideKey", circuit.QuoteCEL(circuit.OverrideAnnotation)},
		{"bypassName", circuit.QuoteCEL(circuit.BypassCondition)},
		{"unsetPolicy", circuit.QuoteCEL(circuit.Unset)},
		{"notApproved", circuit.QuoteCEL(notApproved)},
		// managed webhook names by resource and configuration name, rendered from Options.
		{managedVariable, celManagedMap(opts)},
		{"managedByConfig", managedByConfigCEL},
		{"kindName", kindNameCEL},
		{"isManaged", `object.metadata.name in variables.managedByConfig`},
		{"managed", managedCEL},
		{"isBreaker", `request.userInfo.username == ` + circuit.QuoteCEL(opts.Breaker())},
		{"annotations", annotationsCEL},
		{"oldAnnotations", oldAnnotationsCEL},
		{"override", overrideCEL},
		{"newWebhooks", newWebhooksCEL},
		{"oldWebhooks", oldWebhooksCEL},
		{"webhooksKept", webhooksKeptCEL},
		// the webhooks' names and owned fields, in list order: the webhook
		// named n is at names.indexOf(n), the first one so named, as the Go
		// rule's findHook finds it.
		{"newNames", `variables.newWebhooks.map(w, w.name)`},
		{"oldNames", `variables.oldWebhooks.map(o, o.name)`},
		{"newPolicies", newPoliciesCEL},
		{"oldPolicies", oldPoliciesCEL},
		{"newMarkers", newMarkersCEL},
		{"oldMarkers", oldMarkersCEL},
		{"sameOwned", sameOwnedCEL},
		{"failurePolicyChanges", failurePolicyChangesCEL},
		{"bypassChanges", bypassChangesCEL},
		{"circuit", circuitCEL},
		{"oldCircuit", oldCircuitCEL},
		{"circuitChanges", circuitChangesCEL},
		{"ownedChanges", ownedChangesCEL},
		// what else changes.
		{"labelsChanged", labelsChangedCEL},
		{"annotationsChanged", annotationsChangedCEL},
		{"metadataChanges", metadataChangesCEL()},
		{"webhookSetChanged", webhookSetChangedCEL},
		{"webhooksChanged", webhooksChangedCEL},
		{"unownedChanges", unownedChangesCEL},
		// the owned fields of webhooks that are not managed, which
		// neither the breaker nor the release identity may change, as
		// unapprovedChanges lists them in Go; and what the breaker
		// changes beyond what it owns, as breakerChanges does.
		{"unapprovedChanges", "(" + unapprovedPoliciesCEL + ")\n+ (" + unapprovedMarkersCEL + ")"},
		// the open circuits of managed webhooks, read from the stored record
		// in the grammar circuit renders: [name, entry text] of each managed
		// webhook with an entry, then each one's note.
		{"oldRecord", oldRecordCEL},
		{"openEntries", `variables.managed
  .filter(n, ` + circuit.HasEntryCEL("variables.oldRecord", "n") + `)
  .map(n, [n, ` + circuit.EntryTextCEL("variables.oldRecord", "n") + `])`},
		{"openNotes", `variables.openEntries.map(e, ` + circuit.NoteCEL("e[1]", "e[0]") + `)`},
		// the handed-off entries that the breaker or the release identity
		// changes or drops without putting the original back, as
		// keptOriginals lists them in Go.
		{"newRecord", `size(variables.circuit) == 0 ? '' : variables.circuit[0]`},
		{"keptOriginals", keptOriginalsCEL()},
		{"breakerChanges", `variables.unownedChanges + variables.unapprovedChanges + variables.keptOriginals`},
		// what the release identity changes beyond a release, as
		// releaserChanges lists it in Go.
		{"isReleaser", `!variables.isBreaker && request.userInfo.username == ` + circuit.QuoteCEL(opts.Releaser())},
		{"releaserAnnotationsChanged", releaserAnnotationsChangedCEL},
		{"releaserUnownedChanges", releaserUnownedChangesCEL},
		{"unrestoredPolicies", unrestoredPoliciesCEL()},
		{"releaserRecord", releaserRecordCEL()},
		{"releaserChanges", `variables.releaserUnownedChanges + variables.unapprovedChanges + variables.unrestoredPolicies
  + variables.releaserRecord + variables.keptOriginals`},
	}
	out := make([]admissionregistrationv1.Variable, 0, len(vars))
	for _, v := range vars {
		out = append(out, admissionregistrationv1.Variable{Name: v.name, Expression: v.expr})
	}
	return out
}

// unrestoredPoliciesCEL renders unrestoredPolicies in CEL: managed
// webhooks, present on both sides, in old order, whose failurePolicy
// changes (as failurePolicyChangesCEL finds them) to anything but what
// restores it: the originalFailurePolicy of the webhook's entry in the
// stored record (as circuit.FactOriginalFailurePolicy shows it, bound to
// p by a list of one element), or Fail where that is unset. The record's
// grammar is circuit's, shared with the Go rule (restores).
func unrestoredPoliciesCEL() string {
	const was = `(has(o.failurePolicy) && o.failurePolicy != '' ? o.failurePolicy : variables.unsetPolicy)`
	const now = `variables.newPolicies[variables.newNames.indexOf(o.name)]`
	return `variables.sameOwned ? [] : variables.oldWebhooks
  .filter(o, o.name in variables.managed && o.name in variables.newNames
    && ` + now + ` != ` + was + `
    && !(` + circuit.HasEntryCEL("variables.oldRecord", "o.name") + `
      && ` + restoresCEL(circuit.EntryTextCEL("variables.oldRecord", "o.name"), now, "\n        ") + `))
  .map(o, 'webhooks[name=' + o.name + '].failurePolicy (' + ` + was + `
    + ' -> ' + ` + now + ` + ', ' + ` + circuit.QuoteCEL(notRestored) + ` + ')')`
}

// restoresCEL is circuit.RestoresOriginal in CEL: failurePolicy now (a
// CEL string expression) puts back the original of the record entry text
// entry (as circuit.FactOriginalFailurePolicy shows it, bound to p by a
// list of one element); br breaks the line before ".exists".
func restoresCEL(entry, now, br string) string {
	return `[` + circuit.FactOriginalFailurePolicy.ShowCEL(entry) + `]` + br +
		`.exists(p, ` + now + ` == p || p == variables.unsetPolicy && ` + now + ` == ` + circuit.QuoteCEL(string(admissionregistrationv1.Fail)) + `)`
}

// keptOriginalsCEL renders keptOriginals in CEL: the webhooks of the
// stored object, in old order, whose entry in the stored record is handed
// off (circuit.FactHandedOffAt), and which the
// new record changes (another original or handoff time) or drops in a
// write that neither removes the webhook nor puts its original back (as
// unrestoredPoliciesCEL reads it). The record's grammar is circuit's,
// shared with the Go rule.
func keptOriginalsCEL() string {
	const now = `variables.newPolicies[variables.newNames.indexOf(o.name)]`
	old := circuit.EntryTextCEL("variables.oldRecord", "o.name")
	kept := circuit.EntryTextCEL("variables.newRecord", "o.name")
	same := func(f circuit.Fact) string { return f.CEL("k") + " == " + f.CEL("e") }
	return `variables.oldWebhooks
  .filter(o, ` + circuit.HasEntryCEL("variables.oldRecord", "o.name") + `
    && [` + old + `].exists(e, ` + circuit.FactHandedOffAt.CEL("e") + ` != ''
      && !(` + circuit.HasEntryCEL("variables.newRecord", "o.name") + `
        ? [` + kept + `].exists(k, ` + same(circuit.FactOriginalFailurePolicy) + ` && ` + same(circuit.FactHandedOffAt) + `)
        : !(o.name in variables.newNames)
          || ` + restoresCEL("e", now, "\n            ") + `)))
  .map(o, ` + circuit.QuoteCEL(circuitPath+" entry ") + ` + o.name + ' (' + ` + circuit.QuoteCEL(keepsOriginal) + ` + ')')`
}

// releaserRecordCEL renders recordBeyondRemoval in CEL: the circuit
// record, when the new object carries one that is neither the stored one
// nor the stored one with entries removed, as circuit.OnlyEntriesOfCEL
// finds them (circuit's grammar, shared with the Go rule).
func releaserRecordCEL() string {
	return `size(variables.circuit) == 0 || variables.circuit == variables.oldCircuit
  || size(variables.oldCircuit) > 0 && (` + circuit.OnlyEntriesOfCEL("variables.circuit[0]", "variables.oldRecord") + `)
  ? []
  : ['metadata.annotations[' + variables.recordKey + '] ('
    + (size(variables.oldCircuit) == 0 ? 'added' : 'changed') + ', ' + ` + circuit.QuoteCEL(onlyRemovesEntries) + ` + ')']`
}

// metadataChangeCEL is one breakerMetadata field's change, as
// unownedChanges names it, or []: %[1]s is the field's name, %[2]s the CEL
// literal of an absent field (an absent field is the same as an empty one,
// as when stored), %[3]s the change as the denial names it.
const metadataChangeCEL = `((has(object.metadata.%[1]s) ? object.metadata.%[1]s : %[2]s)
    != (oldObject != null && has(oldObject.metadata.%[1]s) ? oldObject.metadata.%[1]s : %[2]s)
  ? [%[3]s] : [])`

// metadataChangesCEL renders the list of breakerMetadata fields that differ
// between oldObject and object, one metadataChangeCEL each: the
// breakerMetadata table is the Go rule's too.
func metadataChangesCEL() string {
	parts := make([]string, 0, len(breakerMetadata))
	for _, f := range breakerMetadata {
		parts = append(parts, fmt.Sprintf(metadataChangeCEL, f.name, f.absent, circuit.QuoteCEL(f.change())))
	}
	return strings.Join(parts, "\n+ ")
}

// celManagedMap renders the managed webhooks as a CEL map literal from
// resource to configuration name to its list of webhook names, sorted as
// the Go rule sorts them. With no managed configuration at all (every
// target in Observe mode) the mutating map holds noManagedConfigurationName,
// which no configuration can be named, with one webhook named "":
// kube-apiserver type-checks aggregate literals as homogeneous, and with
// only empty maps the webhook names would be dyn, which the rule cannot
// join with strings.
func celManagedMap(opts Options) string {
	byKind := make([]string, 0, len(kinds))
	none := len(opts.Managed) == 0 && len(opts.ManagedValidating) == 0
	for _, kind := range kinds {
		entries := make([]string, 0, len(opts.managed(kind)))
		for _, name := range opts.ConfigNames(kind) {
			entries = append(entries, circuit.QuoteCEL(name)+": "+celList(opts.managedWebhooks(kind, name)))
		}
		if none && kind == circuit.KindMutating {
			entries = append(entries, circuit.QuoteCEL(noManagedConfigurationName)+": "+celList([]string{""}))
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
