package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/util/retry"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// crashTrials is how many random SIGKILL trials TestCrash_randomSIGKILLs runs.
const crashTrials = 100

// invariant checks the contract on the stored object (harness.CheckInvariant):
// the webhook has an entry if and only if the breaker's changes are in
// place, and without one it is exactly as it was before the guard touched it.
func (s *breakerSetup) invariant(t *testing.T, trial int, what string) {
	t.Helper()
	require.NoError(t, harness.CheckInvariant(s.get(), s.hook, s.original), "trial %d %s", trial, what)
}

// TestCrash_randomSIGKILLs: a guard built with failpoints kills itself
// with SIGKILL, at random, just before or just after its writes (of
// transitions, and of the arming entries that arm marking first), across
// opening, closing, handing off and closing the circuit of a target
// removed from the configuration. After every death the contract holds
// on the object, and a restarted guard converges: no stuck state.
func TestCrash_randomSIGKILLs(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	rng := rand.New(rand.NewPCG(20261130, 1))
	// The orphan-close trials run a configuration without the target; the
	// RBAC still lets the service patch the target's configuration.
	setWriteTargets(t, s.ns, s.name, "some-other-configuration")
	var cfg string
	start := func(name, failpoints string) *harness.Guard {
		g, err := env.StartGuard(harness.GuardOptions{
			Name: name, Kubeconfig: s.guardID.KubeconfigPath, Config: cfg, Failpoints: failpoints,
			// One guard at a time, so no Lease to wait for after a death.
			Args: []string{"--leader-elect=false"},
		})
		require.NoError(t, err)
		return g
	}
	openNow := func() bool { return isOpen(s.get(), s.hook, "Bypass") }
	closedNow := func() bool {
		mwc := s.get()
		_, rec := mwc.Annotations[circuit.Annotation]
		return !rec && equality.Semantic.DeepEqual(*findWebhook(mwc, s.hook), s.original)
	}
	handedNow := func() bool {
		mwc := s.get()
		rec, err := circuit.Decode(mwc.Annotations)
		return err == nil && rec[s.hook].HandedOff() && !hasMarker(findWebhook(mwc, s.hook))
	}

	kills, killedAt := map[string]int{}, map[string]int{}
	for trial := 0; trial < crashTrials; trial++ {
		// What the trial drives the breaker to do, from the state it is in.
		var scenario string
		var reached func() bool
		cfg = s.config("")
		switch {
		case openNow() && rng.IntN(4) == 0:
			// The target leaves the configuration while its circuit is open.
			scenario, reached, cfg = "orphan-close", closedNow, otherTargetConfig
		case openNow() && rng.IntN(3) == 0:
			scenario, reached = "handoff", handedNow
			r := env.Kubectl(ctx, "", nil, "annotate", "--overwrite", "mutatingwebhookconfiguration", s.name, circuit.OverrideAnnotation+"=crash trial")
			require.NoError(t, r.Err, r.Stderr)
		case openNow():
			scenario, reached = "close", closedNow
			s.wh.SetBehaviour(webhookPath, harness.Allow())
		default:
			scenario, reached = "open", openNow
			s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
		}

		g := start("crashy", "before-write=0.4,after-write=0.4,before-arm=0.2,after-arm=0.2")
		require.Eventually(t, func() bool {
			exited, _ := g.Exited()
			return exited || reached()
		}, transition, 20*time.Millisecond, "trial %d (%s): neither a death nor the transition", trial, scenario)
		if exited, _ := g.Exited(); exited {
			require.Contains(t, g.Logs(), "Starting the manager", "trial %d: the guard died before it started:\n%s", trial, g.Logs())
			kills[scenario]++
			for _, point := range []string{"before-write", "after-write", "before-arm", "after-arm"} {
				if strings.Contains(g.Logs(), "failpoint "+point+": killing") {
					killedAt[point]++
				}
			}
		}
		g.Kill()
		s.invariant(t, trial, scenario+", after the death")

		// A clean guard picks up from the object alone.
		clean := start("clean", "")
		require.Eventually(t, reached, transition, 20*time.Millisecond, "trial %d (%s): a restarted guard never finished it: stuck", trial, scenario)
		clean.Stop()
		s.invariant(t, trial, scenario+", after the restart")
		if scenario == "handoff" {
			// The handoff kept the breaker's Ignore, and the entry its
			// original: put the original back while the override stands,
			// then hand the configuration back, as an administrator would.
			// The next guard drops the entry, whose original is back.
			mwc := s.get()
			findWebhook(mwc, s.hook).FailurePolicy = s.original.FailurePolicy
			require.NoError(t, env.Client.Update(ctx, mwc))
			r := env.Kubectl(ctx, "", nil, "annotate", "mutatingwebhookconfiguration", s.name, circuit.OverrideAnnotation+"-")
			require.NoError(t, r.Err, r.Stderr)
			s.invariant(t, trial, "handed back")
		}
	}
	t.Logf("%d trials; guards killed by a failpoint: %v; at: %v", crashTrials, kills, killedAt)
	for _, scenario := range []string{"open", "close", "handoff", "orphan-close"} {
		require.NotZero(t, kills[scenario], "no failpoint fired during %s", scenario)
	}
}

// TestCrash_adminEditsAgainstAFlappingBreaker: an administrator makes 100
// edits of fields the breaker does not own while the breaker opens and
// closes the circuit as fast as it can, then 100 more while the override
// hands the configuration over mid-way. Every edit lands (no lost
// update), every value reaches the object in order, and the contract holds
// at the end.
func TestCrash_adminEditsAgainstAFlappingBreaker(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	env.StartGuardT(t, harness.GuardOptions{Name: "guard", Kubeconfig: s.guardID.KubeconfigPath, Config: s.config(""), Args: []string{"--leader-elect=false"}})

	stop := make(chan struct{})
	flapped := make(chan struct{})
	go func() {
		defer close(flapped)
		slow := false
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Second): // longer than an opening, which includes the marking policy's settle time
			}
			slow = !slow
			if slow {
				s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
			} else {
				s.wh.SetBehaviour(webhookPath, harness.Allow())
			}
		}
	}()

	var lastRV string
	edit := func(phase string, i int) {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			mwc := s.get()
			if mwc.Labels == nil {
				mwc.Labels = map[string]string{}
			}
			mwc.Labels["race"] = fmt.Sprintf("%s-%d", phase, i)
			if phase == "override" && i == 50 {
				if mwc.Annotations == nil {
					mwc.Annotations = map[string]string{}
				}
				mwc.Annotations[circuit.OverrideAnnotation] = "race"
			}
			if err := env.Client.Update(ctx, mwc); err != nil {
				return err
			}
			lastRV = mwc.ResourceVersion
			return nil
		}), "%s edit %d was lost", phase, i)
	}
	// Paced so that the edits span several open and close cycles.
	for i := 0; i < 100; i++ {
		edit("plain", i)
		time.Sleep(150 * time.Millisecond)
	}
	for i := 0; i < 100; i++ {
		edit("override", i)
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	<-flapped
	s.writes.waitFor(t, lastRV) // the watch delivers the last edit a moment after it lands

	// Every value reached the object, in order, and the last one stands.
	var seen []string
	for _, m := range s.writes.modified() {
		if v := m.Labels["race"]; v != "" && (len(seen) == 0 || seen[len(seen)-1] != v) {
			seen = append(seen, v)
		}
	}
	require.Len(t, seen, 200, "an edit is missing from the object's history")
	require.Equal(t, "override-99", s.get().Labels["race"])
	// The breaker's writes in between: each toggles the record.
	transitions, had := 0, false
	for _, m := range s.writes.modified() {
		if _, has := m.Annotations[circuit.Annotation]; has != had {
			transitions++
			had = has
		}
	}
	t.Logf("200 edits landed; the breaker wrote %d transitions among them", transitions)
	require.GreaterOrEqual(t, transitions, 2, "the breaker never raced the edits")
	// Handed over: no marker; an entry, if the circuit was open, stays,
	// handed off, with its original.
	require.Eventually(t, func() bool {
		mwc := s.get()
		rec, err := circuit.Decode(mwc.Annotations)
		_, open := rec[s.hook]
		return err == nil && (!open || rec[s.hook].HandedOff()) && !hasMarker(findWebhook(mwc, s.hook))
	}, transition, 50*time.Millisecond, "the override did not hand the configuration over")
}
