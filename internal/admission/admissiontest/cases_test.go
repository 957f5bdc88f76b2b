package admissiontest_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/admission/admissiontest"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

func TestCases_shape(t *testing.T) {
	cases := admissiontest.Cases()
	require.GreaterOrEqual(t, len(cases), 20)
	seen := map[string]bool{}
	actors := map[admissiontest.Actor]bool{}
	overrides := map[string]bool{}
	for _, c := range cases {
		assert.False(t, seen[c.Name], "duplicate case name %q", c.Name)
		seen[c.Name] = true
		actors[c.Actor] = true
		overrides[c.Override] = true
		require.NotNil(t, c.Old, c.Name)
		overreach := c.Actor == admissiontest.Breaker ||
			c.Actor == admissiontest.Releaser && slices.Contains(c.WantMessageContains, admissiontest.ReleaserOverreach)
		if !c.WantAllowed && !overreach {
			assert.Contains(t, c.WantMessageContains, admissiontest.AnnotateCommand, c.Name)
			assert.GreaterOrEqual(t, len(c.WantMessageContains), 2, "%s: a denial must name a field path", c.Name)
		}
		old, _ := c.Build("x")
		for _, h := range old.Webhooks {
			require.NotNil(t, h.ClientConfig.URL, c.Name)
			assert.True(t, strings.HasPrefix(*h.ClientConfig.URL, "https://127.0.0.1:1/"), c.Name)
			require.NotNil(t, h.SideEffects, c.Name)
			assert.Equal(t, admissionregistrationv1.SideEffectClassNone, *h.SideEffects, c.Name)
			assert.NotNil(t, h.FailurePolicy, c.Name)
		}
	}
	assert.Len(t, actors, 4)
	assert.Len(t, overrides, 3)
}

func TestCases_annotateCommandIsTheRules(t *testing.T) {
	for _, kind := range []circuit.Kind{circuit.KindMutating, circuit.KindValidating} {
		c := admissiontest.Case{Kind: kind, WantMessageContains: []string{admissiontest.AnnotateCommand}}
		assert.Equal(t, c.WantMessage("cfg")[0], admission.AnnotateCommand(kind, "cfg", false))
	}
}

func TestCases_buildDoesNotShareState(t *testing.T) {
	c := admissiontest.Cases()[0]
	old, new := c.Build("x")
	assert.NotEqual(t, old, new)
	old2, _ := c.Build("x")
	assert.Equal(t, old, old2)
}
