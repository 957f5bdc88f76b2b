package badday

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

const hangPath = "/hang"

// A webhook that hangs opens in seconds, not after openAfter of its own
// timeouts. With every setting at its default (a probe
// every 1 s, openAfter 3, the probe's slow-call threshold of 4 s or the
// webhook's timeoutSeconds when shorter), a webhook that stops answering
// opens within 8 s whatever its timeoutSeconds. Before, probes ran one
// after another and each waited out timeoutSeconds: about
// 3 × (timeoutSeconds + 1) s, 6 s, 33 s and 93 s for 1, 10 and 30.
func TestBadDay_aHangingWebhookOpensInSeconds(t *testing.T) {
	for _, timeoutSeconds := range []int32{1, 10, 30} {
		t.Run(fmt.Sprintf("timeoutSeconds=%d", timeoutSeconds), func(t *testing.T) { hangs(t, timeoutSeconds) })
	}
}

func hangs(t *testing.T, timeoutSeconds int32) {
	ctx := context.Background()
	name := uniqueName("hang")
	targetNS := namespace(t, name+"-target")
	guardNS := namespace(t, name+"-guard")
	target := newConfigMapTarget(t, name, targetNS, guardNS, hangPath, timeoutSeconds)
	wh, hook, id, original := target.wh, target.hook, target.id, target.original
	g := startGuard(t, name, id, targetConfig(name, hook, "Bypass"), wh, hangPath)

	get := func() *admissionregistrationv1.MutatingWebhookConfiguration {
		got := &admissionregistrationv1.MutatingWebhookConfiguration{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: name}, got))
		return got
	}
	hung := time.Now()
	wh.SetBehaviour(hangPath, harness.Delayed(time.Minute, harness.Allow()))
	require.Eventually(t, func() bool { return harness.IsOpen(get(), hook, "Bypass") }, time.Minute, 50*time.Millisecond,
		"the circuit never opened")
	opened := time.Since(hung)
	t.Logf("timeoutSeconds %d: opened %.2f s after the webhook hung (before: about %d s)", timeoutSeconds, opened.Seconds(), 3*(timeoutSeconds+1))
	assert.LessOrEqual(t, opened, 8*time.Second, "the circuit opened later than 8 s after the hang")

	wh.SetBehaviour(hangPath, harness.Allow())
	require.Eventually(t, func() bool {
		got := get()
		_, record := got.Annotations[circuit.Annotation]
		return !record && equality.Semantic.DeepEqual(*harness.FindWebhook(got, hook), original)
	}, time.Minute, 100*time.Millisecond, "the circuit never closed after recovery")
	exited, _ := g.Exited()
	assert.False(t, exited, "the guard exited")
}
