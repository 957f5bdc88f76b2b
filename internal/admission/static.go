package admission

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// StaticWebhookName is the name of the static ValidatingWebhookConfiguration.
// kube-apiserver only loads manifests whose names end in ".static.k8s.io".
const StaticWebhookName = "webhook-guard.static.k8s.io"

// StaticWebhookEntryName is the fully-qualified name of the single webhook
// in the static configuration.
const StaticWebhookEntryName = "mutatingwebhookconfigurations.webhook-guard.io"

// StaticMatchConditionName names the matchCondition that limits the static
// webhook to the managed configurations.
const StaticMatchConditionName = "managed-configurations"

// StaticWebhookTimeoutSeconds is the static webhook's timeoutSeconds; see
// RenderStaticWebhook.
const StaticWebhookTimeoutSeconds int32 = 5

// RenderStaticWebhook renders the ValidatingWebhookConfiguration manifest
// that control planes with manifest-based admission (staticManifestsDir) load
// from disk. It is the only way to register Handler: kube-apiserver calls
// static webhooks for writes to mutatingwebhookconfigurations, never
// API-registered ones.
//
// url is the full https URL of Handler, including WebhookPath; static
// manifests cannot reference a Service. caBundle verifies its serving
// certificate. The webhook matches CREATE and UPDATE of
// mutatingwebhookconfigurations, and a matchCondition limits it to the
// managed configuration names, so no other configuration waits on it.
//
// failurePolicy is Ignore and timeoutSeconds StaticWebhookTimeoutSeconds (5)
// on purpose: the in-process ValidatingAdmissionPolicy (RenderPolicy)
// enforces the same rule, with the same message, even when the guard's pod
// is down; the webhook is a second enforcement point. With Fail, a dead guard
// would lock administrators out of their own configurations, even out of
// adding the override annotation that hands them over. The short timeout
// bounds how long a write to a managed configuration waits on a slow guard.
func RenderStaticWebhook(url string, caBundle []byte, opts Options) *admissionregistrationv1.ValidatingWebhookConfiguration {
	failurePolicy := admissionregistrationv1.Ignore
	matchPolicy := admissionregistrationv1.Equivalent
	sideEffects := admissionregistrationv1.SideEffectClassNone
	scope := admissionregistrationv1.ClusterScope
	timeout := StaticWebhookTimeoutSeconds
	u := url

	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta: metav1.TypeMeta{
			APIVersion: admissionregistrationv1.SchemeGroupVersion.String(),
			Kind:       "ValidatingWebhookConfiguration",
		},
		ObjectMeta: metav1.ObjectMeta{Name: StaticWebhookName, Labels: Labels()},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: StaticWebhookEntryName,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				URL:      &u,
				CABundle: append([]byte(nil), caBundle...),
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups:   []string{group},
					APIVersions: []string{version},
					Resources:   []string{circuit.KindMutating.Resource(), circuit.KindValidating.Resource()},
					Scope:       &scope,
				},
			}},
			FailurePolicy:           &failurePolicy,
			MatchPolicy:             &matchPolicy,
			NamespaceSelector:       &metav1.LabelSelector{},
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             &sideEffects,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name: StaticMatchConditionName,
				Expression: fmt.Sprintf("request.resource.resource == %s ? object.metadata.name in %s : object.metadata.name in %s",
					circuit.QuoteCEL(circuit.KindValidating.Resource()), celList(opts.ConfigNames(circuit.KindValidating)), celList(opts.ConfigNames(circuit.KindMutating))),
			}},
		}},
	}
}
