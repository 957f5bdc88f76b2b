package probe

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/webhook-guard/webhook-guard/certs"
)

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
