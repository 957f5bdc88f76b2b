package restart

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

const (
	webhookPath = "/mutate"
	// converge bounds how long a test waits for the breaker to act. With
	// 100 ms probes and thresholds of 2 it normally takes well under 1 s
	// once the apiserver answers, plus up to a Lease duration (3 s) for a
	// replacement guard to become leader.
	converge = 30 * time.Second
	// pause is how long the failpoint holds the guard just before or just
	// after its write: long enough for the apiserver to stop (about 0.3 s,
	// gracefully) while the guard waits.
	pause = 3 * time.Second
	// downAfterPause keeps the apiserver down a while after the pause
	// ends, so that a write held before-write is sent to a dead
	// apiserver, not to one that is starting.
	downAfterPause = 500 * time.Millisecond
)

var seq atomic.Uint32

// setup is one test's world: a namespace, a webhook whose health the test
// controls, a MutatingWebhookConfiguration with the target (Fail) and one
// other webhook, and a ServiceAccount for the guard with the installed
// RBAC.
type setup struct {
	t        *testing.T
	ns, name string
	hook     string // the target webhook's name
	other    string // another webhook of the configuration, never a target
	wh       *harness.Webhook
	id       *harness.Identity
	original admissionregistrationv1.MutatingWebhook
}

func newSetup(t *testing.T, prefix string) *setup {
	t.Helper()
	ctx := context.Background()
	n := seq.Add(1)
	s := &setup{t: t, ns: fmt.Sprintf("restart-%d", n), name: fmt.Sprintf("restart-%s-%d", prefix, n)}
	s.hook, s.other = "target."+s.name+".webhook-guard.io", "other."+s.name+".webhook-guard.io"
	require.NoError(t, env.EnsureNamespace(ctx, s.ns))
	wh, err := harness.StartWebhook(harness.WebhookOptions{Host: "127.0.0.1"})
	require.NoError(t, err)
	t.Cleanup(wh.Close)
	s.wh = wh
	wh.SetBehaviour(webhookPath, harness.Allow())
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: s.name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			harness.ConfigMapWebhook(s.hook, s.ns, wh.URL(webhookPath), wh.CA.CertPEM, admissionregistrationv1.Fail),
			harness.ConfigMapWebhook(s.other, "nowhere-"+s.name, "https://127.0.0.1:1/never", nil, admissionregistrationv1.Fail),
		},
	}
	require.NoError(t, env.Client.Create(ctx, mwc))
	s.original = *harness.FindWebhook(mwc, s.hook)
	s.id, err = env.ServiceAccount(ctx, s.ns, "webhook-guard")
	require.NoError(t, err)
	require.NoError(t, env.GrantGuard(ctx, s.ns, s.id, []string{s.name}))
	t.Cleanup(func() {
		if t.Failed() {
			r := env.Kubectl(context.Background(), "", nil, "get", "mutatingwebhookconfiguration", s.name, "-o", "yaml")
			t.Logf("the configuration at the end:\n%s%s", r.Stdout, r.Stderr)
		}
	})
	return s
}

// config is the guard's configuration: Bypass mode, so that "the changes
// are in place" is visible on the webhook alone (harness.CheckInvariant).
func (s *setup) config() string {
	return fmt.Sprintf(`apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
apiserverScrapeInterval: 1s
targets:
- configuration: %s
  webhook: %s
  allowAdmissionWithoutMutation: true
  mode: Bypass
  openAfter: 2
  closeAfter: 2
  probe:
    interval: 100ms
    timeout: 250ms
`, s.name, s.hook)
}

// startGuard runs the real guard binary as the setup's ServiceAccount,
// with failpoints when given. With leaderElect it elects on a Lease with
// the short timings of the other e2e tests (renew deadline 2 s), as the
// Deployment does with longer ones.
func (s *setup) startGuard(name, failpoints string, leaderElect bool) *harness.Guard {
	s.t.Helper()
	args := []string{"--leader-elect=false"}
	if leaderElect {
		args = []string{"--leader-elect", "--leader-election-namespace", s.ns,
			"--leader-election-lease-duration", "3s", "--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "500ms"}
	}
	g, err := env.StartGuard(harness.GuardOptions{Name: name, Kubeconfig: s.id.KubeconfigPath, Config: s.config(), Args: args, Failpoints: failpoints})
	require.NoError(s.t, err)
	s.t.Cleanup(func() {
		g.Stop()
		if s.t.Failed() {
			s.t.Logf("guard %s logs:\n%s", g.Name, g.Logs())
		}
	})
	return g
}

// probes counts the guard's probes: the webhook's calls that are not the
// apiserver's.
func (s *setup) probes() int { return s.wh.Calls(webhookPath) - s.wh.APIServerCalls(webhookPath) }

// waitProbing waits until a guard has probed twice more: it leads and
// counts.
func (s *setup) waitProbing() {
	s.t.Helper()
	from := s.probes()
	require.Eventually(s.t, func() bool { return s.probes() >= from+2 }, converge, 20*time.Millisecond, "no guard probes the webhook")
}

func (s *setup) get() (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	return mwc, env.Client.Get(ctx, client.ObjectKey{Name: s.name}, mwc)
}

func (s *setup) open() bool {
	mwc, err := s.get()
	return err == nil && harness.IsOpen(mwc, s.hook, "Bypass")
}

// restored reports whether the webhook is exactly the original again, with
// no record left.
func (s *setup) restored() bool {
	mwc, err := s.get()
	if err != nil {
		return false
	}
	_, record := mwc.Annotations[circuit.Annotation]
	return !record && equality.Semantic.DeepEqual(*harness.FindWebhook(mwc, s.hook), s.original)
}

// watchInvariant reads the configuration every 10 ms until the returned
// function is called, and checks harness.CheckInvariant on every
// resourceVersion it sees, also while the apiserver comes and goes (reads
// fail then and are skipped). The returned function stops it (as does
// the test's end) and returns how many versions it checked. (A watch would
// end with the apiserver, and the restarted apiserver's watch cache cannot
// resume from before.)
func (s *setup) watchInvariant() func() int {
	var (
		wg      sync.WaitGroup
		once    sync.Once
		stop    = make(chan struct{})
		checked int
	)
	wg.Go(func() {
		seen := ""
		for {
			if mwc, err := s.get(); err == nil && mwc.ResourceVersion != seen {
				seen = mwc.ResourceVersion
				checked++
				if err := harness.CheckInvariant(mwc, s.hook, s.original); err != nil {
					s.t.Errorf("invariant broken: %v", err)
				}
				if w := harness.FindWebhook(mwc, s.other); *w.FailurePolicy != admissionregistrationv1.Fail || harness.HasBypassMarker(w) {
					s.t.Errorf("the other webhook of the configuration was touched (resourceVersion %s)", mwc.ResourceVersion)
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	halt := func() int {
		once.Do(func() { close(stop) })
		wg.Wait()
		return checked
	}
	s.t.Cleanup(func() { halt() })
	return halt
}

// restartAroundWrite stops the apiserver while g holds at its failpoint
// window ("before-write" or "after-write"), keeps it down until the pause
// has ended plus downAfterPause, and starts it again. It requires that the
// window was hit: the apiserver was down before the guard went on. It
// returns when the apiserver was healthy again.
func (s *setup) restartAroundWrite(g *harness.Guard, window string) time.Time {
	s.t.Helper()
	holding := "failpoint " + window + ": sleeping"
	woke := "failpoint " + window + ": woke"
	require.Eventually(s.t, func() bool { return strings.Contains(g.Logs(), holding) }, converge, 5*time.Millisecond,
		"the guard never reached %s", window)
	start := time.Now()
	err := env.StopAPIServer()
	stopped := time.Since(start)
	if err != nil {
		log := env.APIServerLog()
		s.t.Fatalf("%v (after %s); the end of kube-apiserver's log:\n%s", err, stopped, log[max(0, len(log)-20000):])
	}
	require.NotContains(s.t, g.Logs(), woke, "the apiserver took %s to stop, longer than the %s pause: the window was missed", stopped, pause)
	require.Eventually(s.t, func() bool {
		exited, _ := g.Exited()
		return exited || strings.Contains(g.Logs(), woke)
	}, converge, 5*time.Millisecond, "the guard never went on from %s", window)
	time.Sleep(downAfterPause)
	require.NoError(s.t, env.StartAPIServer())
	s.t.Logf("apiserver stopped in %s while the guard held %s; back after %s", stopped.Round(time.Millisecond), window, time.Since(start).Round(time.Millisecond))
	return time.Now()
}

// TestRestart_aroundTheWrite: the apiserver goes down while the guard is
// about to write a transition (before-write) or has just written it
// (after-write), for the opening and for the closing, with and without
// leader election, and comes back. A guard built with failpoints holds at
// the window for 3 s; the test stops the apiserver (gracefully, as a
// kubelet restarting it would) in that time and keeps it down until after
// the guard went on, so a held write goes to a dead apiserver.
//
// Observed: with --leader-elect the guard cannot renew its Lease for the
// renew deadline (2 s) and exits non-zero ("leader election lost"); the
// test starts a replacement, as a Deployment would restart the pod, which
// takes the Lease after it expires and finishes the transition from the
// object alone. Without leader election the same process survives: its
// failed write is retried once the apiserver answers.
//
// Asserted: throughout (every version of the object read every 10 ms,
// also across the restart) an entry exists if and only if the breaker's
// changes are in place, and without one the webhook is the original; the
// other webhook is never touched. At the end an opening is complete
// (exactly one entry, original failurePolicy Fail) and a closing restored
// Fail exactly with no record; the state then stays put (no stuck
// transition, no flapping) and the guard left running is healthy.
func TestRestart_aroundTheWrite(t *testing.T) {
	for _, transition := range []string{"open", "close"} {
		for _, window := range []string{"before-write", "after-write"} {
			for _, leaderElect := range []bool{true, false} {
				name := transition + "/" + window + "/no-leader-election"
				if leaderElect {
					name = transition + "/" + window + "/leader-elect"
				}
				t.Run(name, func(t *testing.T) {
					s := newSetup(t, transition)
					checked := s.watchInvariant()
					if transition == "close" {
						opener := s.startGuard("opener", "", leaderElect)
						s.waitProbing()
						s.wh.SetBehaviour(webhookPath, harness.Drop())
						require.Eventually(t, s.open, converge, 10*time.Millisecond, "the circuit never opened")
						opener.Stop() // releases its Lease
					}
					g := s.startGuard("held", window+"=sleep:"+pause.String(), leaderElect)
					s.waitProbing()
					if transition == "open" {
						s.wh.SetBehaviour(webhookPath, harness.Drop())
					} else {
						s.wh.SetBehaviour(webhookPath, harness.Allow())
					}
					back := s.restartAroundWrite(g, window)
					if window == "before-write" {
						// The held write never reached the apiserver: it was
						// sent to the dead apiserver and failed, or (with leader
						// election) the process lost its Lease and ended, or
						// cancelled the write, first.
						require.Eventually(t, func() bool {
							exited, _ := g.Exited()
							return strings.Contains(g.Logs(), "could not write 1 change(s), nothing was changed") ||
								(leaderElect && exited && !strings.Contains(g.Logs(), "failpoint before-write: woke"))
						}, converge, 10*time.Millisecond, "the held write neither failed nor was abandoned while the apiserver was down")
					}

					done := s.restored
					if transition == "open" {
						done = s.open
					}
					if leaderElect {
						// It could not renew its Lease for longer than the
						// renew deadline while the apiserver was down.
						require.Eventually(t, func() bool { exited, _ := g.Exited(); return exited }, converge, 10*time.Millisecond,
							"the leader kept running after it could not renew its Lease for longer than the renew deadline")
						_, code := g.Exited()
						assert.Contains(t, g.Logs(), "leader election lost")
						t.Logf("the guard exited with code %d after losing its Lease; starting a replacement, as a Deployment would", code)
						g = s.startGuard("replacement", "", true)
					} else {
						exited, code := g.Exited()
						require.False(t, exited, "the guard without leader election exited (code %d) when the apiserver went away", code)
					}
					require.Eventually(t, done, converge, 10*time.Millisecond, "the %s never completed after the restart: stuck", transition)
					t.Logf("the %s was complete %s after the apiserver was back", transition, time.Since(back).Round(time.Millisecond))
					// It stays so: a few probe intervals with nothing to do.
					s.waitProbing()
					time.Sleep(500 * time.Millisecond)
					require.True(t, done(), "the %s did not stay", transition)
					mwc, err := s.get()
					require.NoError(t, err)
					rec, err := circuit.Decode(mwc.Annotations)
					require.NoError(t, err)
					if transition == "open" {
						require.Len(t, rec, 1, "want exactly one entry")
						require.NotNil(t, rec[s.hook].OriginalFailurePolicy)
						require.Equal(t, admissionregistrationv1.Fail, *rec[s.hook].OriginalFailurePolicy, "the original failurePolicy was lost")
					} else {
						require.Empty(t, rec)
						require.Equal(t, admissionregistrationv1.Fail, *harness.FindWebhook(mwc, s.hook).FailurePolicy)
					}
					exited, code := g.Exited()
					require.False(t, exited, "the guard left running exited (code %d)", code)
					require.NotContains(t, g.Logs(), "panic")
					t.Logf("invariant checked on %d versions of the object", checked())
				})
			}
		}
	}
}

// randomTrials is how many open-and-close cycles TestRestart_randomDowntime
// runs: 1 keeps the package near 2 minutes; set
// WEBHOOK_GUARD_RESTART_TRIALS for more.
func randomTrials(t *testing.T) int {
	t.Helper()
	n := 1
	if v := os.Getenv("WEBHOOK_GUARD_RESTART_TRIALS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err, "WEBHOOK_GUARD_RESTART_TRIALS")
	}
	return n
}

// TestRestart_randomDowntime: the guard as released (no failpoints) runs
// with leader election, as the Deployment does. The webhook fails (then
// recovers), and after a random offset of 0 to 600 ms, which falls before
// or after the guard's write (an opening with 100 ms probes and openAfter 2
// is written about 200 ms in), the apiserver is stopped for a random 0.2 to
// 3 s and started again. A guard that exited meanwhile (it lost its Lease)
// is replaced, as a Deployment would. The same contract as in
// TestRestart_aroundTheWrite holds throughout, and the transition
// completes.
func TestRestart_randomDowntime(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	s := newSetup(t, "random")
	checked := s.watchInvariant()
	g := s.startGuard("guard-0", "", true)
	replaced := 0
	// supervise restarts the guard when it has exited, as a Deployment would.
	supervise := func(when string) {
		if exited, code := g.Exited(); exited {
			replaced++
			t.Logf("%s: the guard had exited with code %d; starting a replacement", when, code)
			g = s.startGuard(fmt.Sprintf("guard-%d", replaced), "", true)
		}
	}
	s.waitProbing()
	for trial := 0; trial < randomTrials(t); trial++ {
		for _, transition := range []string{"open", "close"} {
			done, behaviour := s.open, harness.Drop()
			if transition == "close" {
				done, behaviour = s.restored, harness.Allow()
			}
			offset := time.Duration(rng.IntN(600)) * time.Millisecond
			down := 200*time.Millisecond + time.Duration(rng.IntN(2800))*time.Millisecond
			s.wh.SetBehaviour(webhookPath, behaviour)
			time.Sleep(offset)
			already := done()
			start := time.Now()
			require.NoError(t, env.StopAPIServer())
			time.Sleep(down)
			require.NoError(t, env.StartAPIServer())
			back := time.Now()
			t.Logf("trial %d %s: apiserver down %s from %s after the webhook changed (transition already written before the stop: %t)",
				trial, transition, back.Sub(start).Round(time.Millisecond), offset, already)
			what := fmt.Sprintf("trial %d %s", trial, transition)
			// Polled here, not in require.Eventually: supervise starts
			// processes and must run on the test's goroutine.
			for supervise(what); !done(); supervise(what) {
				require.Less(t, time.Since(back), converge, "%s never completed after the restart: stuck", what)
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("trial %d %s: complete %s after the apiserver was back", trial, transition, time.Since(back).Round(time.Millisecond))
			if transition == "open" {
				mwc, err := s.get()
				require.NoError(t, err)
				rec, err := circuit.Decode(mwc.Annotations)
				require.NoError(t, err)
				require.Len(t, rec, 1, "want exactly one entry")
				require.Equal(t, admissionregistrationv1.Fail, *rec[s.hook].OriginalFailurePolicy, "the original failurePolicy was lost")
			}
		}
	}
	supervise("the end")
	s.waitProbing()
	require.True(t, s.restored(), "the circuit did not stay closed")
	exited, code := g.Exited()
	require.False(t, exited, "the guard left running exited (code %d)", code)
	t.Logf("%d guard replacements; invariant checked on %d versions of the object", replaced, checked())
}
