// Package admission owns webhook-guard's "guard": the rule that gives the
// breaker unambiguous ownership of the fields it writes when it opens a
// circuit on a failing admission webhook (mutating or validating), and the
// two ways that rule is enforced in front of kube-apiserver.
//
// The owned fields of a managed MutatingWebhookConfiguration are:
//
//   - the failurePolicy of each managed webhook;
//   - the bypass matchCondition ([circuit.BypassCondition]) on any webhook
//     of the configuration;
//   - the circuit annotation ([circuit.Annotation]), the breaker's record of
//     what it changed.
//
// Only the breaker's identity may change them, unless an administrator hands
// the configuration over with a non-empty [circuit.OverrideAnnotation]. Everything else (other fields, other webhooks' failurePolicy,
// unmanaged configurations, DELETE, removing the override itself) is allowed,
// except to the breaker's identity: on an UPDATE it may change nothing but
// the owned fields, so no other webhook field and no metadata but the
// circuit annotation and the marking's arming entries (no label, other
// annotation, owner reference or finalizer; kube-apiserver keeps the rest
// of the metadata itself). Nor may it change the bypass matchCondition or
// the failurePolicy of a webhook that is not managed, not an approved
// target: the marker there would switch off a webhook nobody approved,
// with no record entry and no Event. That is left to administrators, with
// the override for the marker.
//
// The release identity ([Options.Releaser], by default the breaker's
// ServiceAccount name plus [circuit.ReleaseSuffix] in its namespace: the
// account of the Helm chart's pre-delete hook, which runs "guard release")
// is held to a rule of the same strength. It is not the breaker, so its
// owned-field changes need the override annotation like anyone's; and it
// may create no managed configuration, and on an UPDATE change nothing but
// what a release changes: the owned fields, a managed webhook's
// failurePolicy only back to the originalFailurePolicy of its entry in the
// stored record, the circuit record only by removing entries (so every
// original it restores is one it did not write), the arming entries and
// the override annotation. Like the
// breaker, and even with the override, it may not change the bypass
// matchCondition or the failurePolicy of a webhook that is not managed.
//
// The package provides:
//
//   - [Decide], the rule in pure Go, the reference for the case table in the
//     admissiontest subpackage;
//   - [RenderPolicy], the same rule rendered as a ValidatingAdmissionPolicy
//     (CEL, evaluated in-process by kube-apiserver) and its binding;
//   - [Handler], a controller-runtime admission handler that serves the rule
//     as a webhook at [WebhookPath];
//   - [RenderStaticWebhook] and [MarshalManifest], the static
//     ValidatingWebhookConfiguration manifest, named [StaticWebhookName], for
//     control planes that load admission configuration from
//     staticManifestsDir.
//
// What this package must not do: never register an API (REST-created)
// ValidatingWebhookConfiguration over mutatingwebhookconfigurations.
// kube-apiserver never calls API-registered webhooks for writes to admission
// configuration resources (see IsExemptAdmissionConfigurationResource in
// k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules), so such a
// registration would look like protection and give none. The webhook is only
// ever registered through the static manifest, and the ValidatingAdmissionPolicy
// is the enforcement that works on every control plane.
//
// [PolicyChecker] is the one part that talks to the API server, and it only
// reads: the installer applies the rendered policy and binding ("guard
// manifests policy", or the chart's template of the same rendering,
// [PolicyTemplateJSON]), and the checker reports by Event and metric when
// they are missing or not the guard's rendering ([PolicyProblems]). The
// breaker's token may write no admission policy: kube-apiserver runs no
// admission policy on writes to admission policies, so any identity that
// may write the guard policy may switch it off.
// [PolicyEnforced], the readiness signal, reads them from any replica and
// accepts only a rule it can render itself, this version's or an earlier
// one's (recorded in rules/), for its breaker and the targets the policy's
// [PolicyInputsAnnotation] names. The rule, the renderings and the handler
// are pure. The names on webhook configurations and the circuit record come
// from package circuit; this package names only its own objects and their
// annotation.
package admission
