package breaker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/events"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// A canary that keeps failing (a policy engine's */* webhook hangs and
// refuses every Event create) does not hold the opening back for longer
// than markingBound, and is not sent more often than once per bound: the
// circuit opens, armed by its record entry, and says marking was not
// confirmed, and why.
func TestArming_aFailingCanaryHoldsTheOpeningForABoundOnly(t *testing.T) {
	refused := errors.New(`Internal error occurred: failed calling webhook "policy.engine.example": context deadline exceeded`)
	f := newBatchFixture(t, []string{breakertest.WhA}, 3, 2)
	f.canary.err = refused
	bound := decide.MarkingBound(f.r.Targets, []string{breakertest.WhA})

	f.fail(breakertest.WhA, 2)
	f.reconcile() // armed ahead of the threshold
	require.Equal(t, []string{breakertest.WhA}, f.armed())
	f.fail(breakertest.WhA, 1)
	start := f.clock.Now()
	for f.clock.Since(start) < bound {
		res := f.reconcile()
		assert.Empty(t, f.record(), "opened %s after the threshold, before its bound %s", f.clock.Since(start), bound)
		assert.Positive(t, res.RequeueAfter)
		f.clock.Step(decide.MarkingPoll)
	}
	assert.LessOrEqual(t, f.canary.calls, 2, "a failing canary is sent at most once per bound")

	f.reconcile()
	assert.Equal(t, []string{breakertest.WhA}, f.record(), "the opening went once it had waited its bound")
	assert.Empty(t, f.armed(), "the record entry arms the marking now")
	assert.Equal(t, 1.0, testutil.ToFloat64(f.r.Metrics.MarkingUnconfirmed.WithLabelValues(string(circuit.KindMutating), breakertest.ConfigName, breakertest.WhA)))
	assert.Equal(t, float64(f.canary.calls), testutil.ToFloat64(f.r.Metrics.CanaryFailures))
	var opened []string
	for rec := f.r.Recorder.(*events.FakeRecorder); len(rec.Events) > 0; {
		if e := <-rec.Events; strings.Contains(e, string(decide.Opened)) {
			opened = append(opened, e)
		}
	}
	require.Len(t, opened, 1)
	assert.Contains(t, opened[0], "marking not confirmed: sending the marking canary")
	assert.Contains(t, opened[0], "context deadline exceeded")
}

// The bound is one probe interval of the slowest opening target, and never
// less than circuit.DisarmAfter.
func TestMarkingBound(t *testing.T) {
	f := newBatchFixture(t, []string{breakertest.WhA, breakertest.WhB}, 3, 2)
	cs := []string{breakertest.WhA}
	assert.Equal(t, circuit.DisarmAfter, decide.MarkingBound(f.r.Targets, cs))
	slow := f.r.Targets[0]
	slow.Probe.Interval = 5 * time.Second
	assert.Equal(t, 5*time.Second, decide.MarkingBound(append(f.r.Targets, slow), cs))
}
