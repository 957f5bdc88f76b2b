package admission_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/admission"
)

func TestMarshalManifest_roundTrip(t *testing.T) {
	vwc := admission.RenderStaticWebhook(staticURL, []byte("ca"), admission.Options{Managed: map[string][]string{"cfg": {"w.example.com"}}})
	out, err := admission.MarshalManifest(vwc)
	require.NoError(t, err)
	s := string(out)
	assert.True(t, strings.HasPrefix(s, "apiVersion: admissionregistration.k8s.io/v1\n"), s)
	assert.Contains(t, s, "kind: ValidatingWebhookConfiguration\n")
	assert.Contains(t, s, "url: "+staticURL)
	assert.NotContains(t, s, "service:")
	var got admissionregistrationv1.ValidatingWebhookConfiguration
	require.NoError(t, yaml.UnmarshalStrict(out, &got))
	assert.Equal(t, *vwc, got)

	p, b := admission.RenderPolicy(admission.Options{Managed: map[string][]string{"cfg": {"w.example.com"}}})
	out, err = admission.MarshalManifest(vwc, p, b)
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(string(out), "\n---\n"))
}

func TestMarshalManifest_requiresTypeMeta(t *testing.T) {
	vwc := admission.RenderStaticWebhook(staticURL, nil, admission.Options{})
	vwc.TypeMeta.Kind = ""
	_, err := admission.MarshalManifest(vwc)
	assert.Error(t, err)
	_, err = admission.MarshalManifest(nil)
	assert.Error(t, err)
}
