package probe

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/webhook-guard/webhook-guard/certs"
)

type countingMapper struct {
	meta.RESTMapper
	kindFor int
}

func (m *countingMapper) KindFor(gvr schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	m.kindFor++
	return m.RESTMapper.KindFor(gvr)
}

// The RESTMapper is asked once per resource, not once per probe; an
// answer it could not give is not remembered.
func TestTargetFor_remembersTheMappersAnswers(t *testing.T) {
	m := &countingMapper{RESTMapper: testMapper()}
	var cache sync.Map
	pods := admissionregistrationv1.MutatingWebhook{Rules: []admissionregistrationv1.RuleWithOperations{{
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
	}}}
	for range 3 {
		got, err := targetFor(pods, m, &cache)
		require.NoError(t, err)
		assert.Equal(t, "Pod", got.kind)
		assert.Equal(t, probeNamespace, got.namespace)
	}
	assert.Equal(t, 1, m.kindFor)

	unknownResource := pods
	unknownResource.Rules = []admissionregistrationv1.RuleWithOperations{{
		Rule: admissionregistrationv1.Rule{APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}},
	}}
	for range 2 {
		_, err := targetFor(unknownResource, m, &cache)
		require.Error(t, err)
	}
	assert.Equal(t, 3, m.kindFor)
}

// A caBundle is parsed once; another bundle gets its own pool, and one
// with no certificate is refused every time.
func TestProber_rootsFor(t *testing.T) {
	var p Prober
	a, err := certs.NewCA("a", 0)
	require.NoError(t, err)
	b, err := certs.NewCA("b", 0)
	require.NoError(t, err)
	poolA, ok := p.rootsFor(rootsKeyOf(a.CertPEM), a.CertPEM)
	require.True(t, ok)
	again, ok := p.rootsFor(rootsKeyOf(a.CertPEM), a.CertPEM)
	require.True(t, ok)
	assert.Same(t, poolA, again)
	poolB, ok := p.rootsFor(rootsKeyOf(b.CertPEM), b.CertPEM)
	require.True(t, ok)
	assert.NotSame(t, poolA, poolB)
	for range 2 {
		_, ok = p.rootsFor(rootsKeyOf([]byte("garbage")), []byte("garbage"))
		assert.False(t, ok)
	}
}
