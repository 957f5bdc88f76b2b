package partition

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// TestPartition_aCutRoadOpensWithTheDefaults: a target configured the way
// docs/configuration.md says, approved (allowAdmissionWithoutMutation, which
// has no default) and naming its Service for the path probe, every other
// setting at its default (a probe every second,
// openAfter 3, the apiserver's /metrics read every 30 s, Ignore mode).
// The road between kube-apiserver and the healthy webhook is cut while
// the direct probe keeps reaching it: the road alone opens the circuit,
// within openAfter probe intervals plus a probe's timeout (about
// 10 s), long before a /metrics read could.
func TestPartition_aCutRoadOpensWithTheDefaults(t *testing.T) {
	w := newWorld(t)
	w.withRoad()
	config := fmt.Sprintf(`apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
targets:
- configuration: %s
  webhook: %s
  allowAdmissionWithoutMutation: true
  apiserverSignal:
    pathProbe:
      service: {namespace: %s, name: hook, port: %d}
`, w.name, w.hook, w.ns, w.wh.Port())
	g := env.StartGuardT(t, harness.GuardOptions{Name: "defaults", Kubeconfig: w.id.KubeconfigPath, Config: config, WithoutMarking: true})
	waitHealthyProbes(t, g, 3)

	cut := time.Now()
	w.cutRoad()
	entry := w.waitOpen()
	took := time.Since(cut)
	t.Logf("with every default, the cut road opened the circuit %s after the cut (signal %s)", took.Round(10*time.Millisecond), entry.Signal)
	assert.Equal(t, decide.SignalRoad, entry.Signal, "the road opens it, not a /metrics read 30 s apart")
	assert.Less(t, took, 15*time.Second, "the issue's bound is about 10 s with the defaults; 15 s leaves the shared machine room")

	w.healRoad()
	w.waitClosed()
}
