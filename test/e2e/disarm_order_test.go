package e2e

// Every write that takes a bypass away keeps marking
// armed, and disarms it in a later write. A closing did so already; these
// tests run a stream of creates through the two other such writes, the
// handoff to an administrator and "guard release", and find no object
// admitted with neither the mutation nor the mark.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// createStream creates ConfigMaps in s's namespace, one every 20 ms, until
// the returned function is called; that function returns the names
// admitted.
func (s *breakerSetup) createStream(prefix string) func() []string {
	ctx := context.Background()
	var mu sync.Mutex
	var names []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("%s-%d", prefix, i)
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name, Labels: map[string]string{"app": "demo"}}}
			if err := env.Client.Create(ctx, cm); err == nil {
				mu.Lock()
				names = append(names, name)
				mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	return func() []string {
		close(stop)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return names
	}
}

// escapes counts, among the ConfigMaps named, those marked and those
// admitted with neither the mutation (mutated=yes) nor the mark.
func (s *breakerSetup) escapes(names []string) (markedCount, escaped int) {
	s.t.Helper()
	for _, name := range names {
		cm := &corev1.ConfigMap{}
		require.NoError(s.t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: name}, cm))
		_, isMarked := marked(cm)
		if isMarked {
			markedCount++
		}
		if !isMarked && cm.Labels["mutated"] != "yes" {
			escaped++
		}
	}
	return markedCount, escaped
}

// unarmedRemovals returns how many of the writes seen on s's configuration
// took the bypass away with the webhook's marking disarmed in that same
// write (no arming entry for it), and how many took it away at all.
func (s *breakerSetup) unarmedRemovals() (unarmed, removals int) {
	s.t.Helper()
	prev := s.writes.initial
	for _, next := range s.writes.modified() {
		if w := findWebhook(prev, s.hook); w != nil && hasMarker(w) {
			if w := findWebhook(next, s.hook); w != nil && !hasMarker(w) {
				removals++
				armed, err := circuit.DecodeArming(next.Annotations)
				require.NoError(s.t, err)
				rec, err := circuit.Decode(next.Annotations)
				require.NoError(s.t, err)
				_, inRecord := rec[s.hook] // a kept (handed-off) entry marks too
				if _, ok := armed[s.hook]; !ok && !inRecord {
					unarmed++
				}
			}
		}
		prev = next
	}
	return unarmed, removals
}

// The handoff removes the bypass and keeps the record entry, which marks
// as an arming entry does while failurePolicy stays Ignore. Creates
// streamed through the handoff are each mutated or marked.
func TestMarking_aHandoffKeepsMarkingThroughItsKeptEntry(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	mutate := harness.PatchLabel("mutated", "yes")
	s.openThenStop()
	s.wh.SetBehaviour(webhookPath, mutate)

	stream := s.createStream("handoff")
	time.Sleep(500 * time.Millisecond) // bypassed, so marked
	r := env.Kubectl(ctx, "", nil, "annotate", "mutatingwebhookconfiguration", s.name, circuit.OverrideAnnotation+"=INC-32 taking it back")
	require.NoError(t, r.Err, r.Stderr)
	g := s.startGuard("handoff")
	require.Eventually(t, func() bool {
		mwc := s.get()
		rec, err := circuit.Decode(mwc.Annotations)
		return err == nil && rec[s.hook].HandedOff() && !hasMarker(findWebhook(mwc, s.hook))
	}, transition, 20*time.Millisecond, "the guard never handed the configuration off")
	handedOff := s.get()
	time.Sleep(500 * time.Millisecond) // the webhook mutates again
	names := stream()
	g.Stop()

	armed, err := circuit.DecodeArming(handedOff.Annotations)
	require.NoError(t, err)
	markedCount, escaped := s.escapes(names)
	unarmed, removals := s.unarmedRemovals()
	t.Logf("%d creates streamed through the handoff: %d marked, %d with neither the mutation nor the mark; armed in the handoff's write: %v; "+
		"%d of %d writes that took the bypass away disarmed in the same write", len(names), markedCount, escaped, armed.Webhooks(), unarmed, removals)
	assert.Zero(t, escaped)
	assert.Positive(t, markedCount)
	assert.Equal(t, 1, removals, "the bypass goes once, with the handoff")
	assert.Zero(t, unarmed, "the handoff's own write disarmed marking")
}

// "guard release" restores the webhook in one write and disarms its
// marking in a later one, then deletes the marking policy. Creates
// streamed through the release are each mutated or marked.
func TestRelease_disarmsAfterTheWebhookIsBack(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	mutate := harness.PatchLabel("mutated", "yes")
	s.openThenStop()
	s.wh.SetBehaviour(webhookPath, mutate)
	bin, err := env.BuildGuard()
	require.NoError(t, err)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(s.config("")), 0o600))

	stream := s.createStream("release")
	time.Sleep(500 * time.Millisecond) // bypassed, so marked
	out, err := releaseRun(ctx, bin, env.KubeconfigPath, s.name, "--config", cfg, "-n", s.ns, "--breaker", s.guardID.Username)
	require.NoError(t, err, "guard release:\n%s", out)
	time.Sleep(500 * time.Millisecond) // the webhook mutates again
	names := stream()
	t.Logf("guard release:\n%s", out)
	assert.Contains(t, out, "released (failurePolicy Ignore -> Fail, bypass matchCondition removed, record entry removed, arming entry removed 2s later)")
	assert.Contains(t, out, "mutatingwebhookconfiguration/"+s.name+": marking disarmed ("+s.hook+")")
	assert.NotContains(t, s.get().Annotations, circuit.ArmingAnnotation)

	markedCount, escaped := s.escapes(names)
	unarmed, removals := s.unarmedRemovals()
	t.Logf("%d creates streamed through guard release: %d marked, %d with neither the mutation nor the mark; %d of %d writes that took the bypass away disarmed in the same write",
		len(names), markedCount, escaped, unarmed, removals)
	assert.Zero(t, escaped)
	assert.Positive(t, markedCount)
	assert.Equal(t, 1, removals, "the bypass goes once, with the restore")
	assert.Zero(t, unarmed, "the restoring write disarmed marking")
}
