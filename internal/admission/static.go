package admission

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

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

// MarshalManifest renders objs as YAML documents separated by "---". Every
// object must have its TypeMeta (apiVersion and kind) set. An empty status
// is left out.
func MarshalManifest(objs ...runtime.Object) ([]byte, error) {
	var docs []string
	for i, obj := range objs {
		if obj == nil {
			return nil, fmt.Errorf("manifest object %d is nil", i)
		}
		gvk := obj.GetObjectKind().GroupVersionKind()
		if gvk.Kind == "" || gvk.Version == "" {
			return nil, fmt.Errorf("manifest object %d (%T) has no apiVersion/kind set", i, obj)
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("marshal %s: %w", gvk.Kind, err)
		}
		var fields map[string]any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&fields); err != nil {
			return nil, fmt.Errorf("marshal %s: %w", gvk.Kind, err)
		}
		if status, ok := fields["status"].(map[string]any); ok && len(status) == 0 {
			delete(fields, "status")
		}
		doc, err := yaml.Marshal(fields)
		if err != nil {
			return nil, fmt.Errorf("marshal %s: %w", gvk.Kind, err)
		}
		docs = append(docs, string(doc))
	}
	return []byte(strings.Join(docs, "---\n")), nil
}
