// Package admission owns webhook-guard's "guard": the rule that gives the
// breaker unambiguous ownership of the fields it writes when it opens a
// circuit on a failing mutating webhook, and the two ways that rule is
// enforced in front of kube-apiserver.
//
// The owned fields of a managed MutatingWebhookConfiguration are:
//
//   - the failurePolicy of each managed webhook;
//   - the bypass matchCondition named "webhook-guard.io/circuit-open" on any
//     webhook of the configuration;
//   - the annotation "webhook-guard.io/circuit", the breaker's record of what
//     it changed.
//
// Only the breaker's identity may change them, unless an administrator hands
// the configuration over with a non-empty "webhook-guard.io/override"
// annotation. Everything else (other fields, other webhooks' failurePolicy,
// unmanaged configurations, DELETE, removing the override itself) is allowed.
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
// The package does not talk to the API server: wiring (reconciling the
// policy, serving the handler, writing the manifest) belongs to the binary.
package admission
