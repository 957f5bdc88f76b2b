package admission_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/webhook-guard/webhook-guard/internal/admission"
)

const staticURL = "https://127.0.0.1:9443" + admission.WebhookPath

func TestRenderStaticWebhook_rendersTheStaticManifest(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	opts := admission.Options{
		Managed:           map[string][]string{"zeta": {"z.example.com"}, `we'ird`: nil, "alpha": {"a.example.com"}},
		ManagedValidating: map[string][]string{"policy-engine": {"v.example.com"}},
	}
	vwc := admission.RenderStaticWebhook(staticURL, ca, opts)

	assert.Equal(t, admission.StaticWebhookName, vwc.Name)
	assert.True(t, strings.HasSuffix(vwc.Name, ".static.k8s.io"))
	assert.Equal(t, "admissionregistration.k8s.io/v1", vwc.APIVersion)
	assert.Equal(t, "ValidatingWebhookConfiguration", vwc.Kind)
	assert.Equal(t, "webhook-guard", vwc.Labels["app.kubernetes.io/name"])

	require.Len(t, vwc.Webhooks, 1)
	wh := vwc.Webhooks[0]
	assert.Equal(t, "mutatingwebhookconfigurations.webhook-guard.io", wh.Name)
	assert.GreaterOrEqual(t, strings.Count(wh.Name, "."), 2, "webhook names must be fully qualified")
	require.NotNil(t, wh.ClientConfig.URL)
	assert.Equal(t, staticURL, *wh.ClientConfig.URL)
	assert.Nil(t, wh.ClientConfig.Service, "static manifests cannot reference a Service")
	assert.Equal(t, ca, wh.ClientConfig.CABundle)

	require.Len(t, wh.Rules, 1)
	assert.Equal(t, []string{"admissionregistration.k8s.io"}, wh.Rules[0].APIGroups)
	assert.Equal(t, []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}, wh.Rules[0].Resources)
	assert.ElementsMatch(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, wh.Rules[0].Operations)

	require.Len(t, wh.MatchConditions, 1)
	assert.Equal(t, `request.resource.resource == 'validatingwebhookconfigurations' ? object.metadata.name in ['policy-engine'] : object.metadata.name in ['alpha', 'we\'ird', 'zeta']`, wh.MatchConditions[0].Expression)

	require.NotNil(t, wh.FailurePolicy)
	assert.Equal(t, admissionregistrationv1.Ignore, *wh.FailurePolicy)
	require.NotNil(t, wh.TimeoutSeconds)
	assert.EqualValues(t, 5, *wh.TimeoutSeconds)
	require.NotNil(t, wh.SideEffects)
	assert.Equal(t, admissionregistrationv1.SideEffectClassNone, *wh.SideEffects)
	assert.Equal(t, []string{"v1"}, wh.AdmissionReviewVersions)

	// The caller's slice is copied.
	ca[0] = 'X'
	assert.NotEqual(t, ca, wh.ClientConfig.CABundle)
}

func TestRenderStaticWebhook_emptyManagedMatchesNothing(t *testing.T) {
	vwc := admission.RenderStaticWebhook(staticURL, nil, admission.Options{})
	assert.Equal(t, "request.resource.resource == 'validatingwebhookconfigurations' ? object.metadata.name in [] : object.metadata.name in []", vwc.Webhooks[0].MatchConditions[0].Expression)
}
