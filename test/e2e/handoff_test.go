package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// fourCircuits is a configuration with four approved webhooks, two in
// Bypass mode and two in Ignore mode, each answered on its own path of one
// test webhook.
type fourCircuits struct {
	*breakerSetup
	hooks     []string
	paths     map[string]string
	modes     map[string]string
	originals map[string]admissionregistrationv1.MutatingWebhook
}

func newFourCircuits(t *testing.T) *fourCircuits {
	t.Helper()
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	f := &fourCircuits{breakerSetup: s, paths: map[string]string{}, modes: map[string]string{}, originals: map[string]admissionregistrationv1.MutatingWebhook{}}
	mwc := s.get()
	for i := 0; i < 4; i++ {
		hook, path := s.hook, webhookPath
		if i > 0 {
			hook, path = fmt.Sprintf("slow%d.%s.webhook-guard.io", i, s.name), fmt.Sprintf("%s-%d", webhookPath, i)
			w := *findWebhook(mwc, s.hook).DeepCopy()
			w.Name, w.ClientConfig.URL = hook, ptr.To(s.wh.URL(path))
			if i == 3 {
				w.MatchConditions = nil // no matchConditions of its own
			}
			mwc.Webhooks = append(mwc.Webhooks, w)
		}
		f.hooks = append(f.hooks, hook)
		f.paths[hook] = path
		f.modes[hook] = []string{"Bypass", "Ignore"}[i%2]
		s.wh.SetBehaviour(path, harness.Allow())
	}
	// Not managed yet: the guard's policy arrives with the guard.
	require.NoError(t, env.Client.Update(ctx, mwc))
	stored := s.get()
	for _, hook := range f.hooks {
		f.originals[hook] = *findWebhook(stored, hook)
	}
	s.writes = watchWrites(t, stored)
	return f
}

func (f *fourCircuits) config() string {
	var b strings.Builder
	b.WriteString("apiVersion: config.webhook-guard.io/v1alpha1\nkind: GuardConfiguration\napiserverScrapeInterval: 1s\ntargets:\n")
	for _, hook := range f.hooks {
		fmt.Fprintf(&b, "- configuration: %s\n  webhook: %s\n  allowAdmissionWithoutMutation: true\n  mode: %s\n  openAfter: 2\n  closeAfter: 2\n  probe:\n    interval: 100ms\n    timeout: 250ms\n",
			f.name, hook, f.modes[hook])
	}
	return b.String()
}

// statusAndRelease runs "guard status", then "guard release", against the
// configuration as an administrator would, with no guard running.
func (f *fourCircuits) statusAndRelease(ctx context.Context) (status, release string) {
	f.t.Helper()
	bin, err := env.BuildGuard()
	require.NoError(f.t, err)
	cfg := filepath.Join(f.t.TempDir(), "config.yaml")
	require.NoError(f.t, os.WriteFile(cfg, []byte(f.config()), 0o600))
	out, err := exec.CommandContext(ctx, bin, "status", "--config", cfg, "--kubeconfig", env.KubeconfigPath, "--endpoint", "").CombinedOutput()
	require.NoError(f.t, err, "guard status:\n%s", out)
	rel, err := releaseRun(ctx, bin, env.KubeconfigPath, f.name, "--config", cfg, "-n", f.ns, "--breaker", f.guardID.Username)
	require.NoError(f.t, err, "guard release:\n%s", rel)
	return string(out), rel
}

func (f *fourCircuits) startGuard() *harness.Guard {
	f.t.Helper()
	return env.StartGuardT(f.t, harness.GuardOptions{Name: "guard", Kubeconfig: f.guardID.KubeconfigPath, Config: f.config(),
		Args: []string{"--leader-elect", "--leader-election-namespace", f.ns}})
}

func (f *fourCircuits) setAll(b harness.Behaviour) {
	for _, hook := range f.hooks {
		f.wh.SetBehaviour(f.paths[hook], b)
	}
}

func (f *fourCircuits) waitAllOpen() {
	f.t.Helper()
	require.Eventually(f.t, func() bool {
		mwc := f.get()
		for _, hook := range f.hooks {
			if !isOpen(mwc, hook, f.modes[hook]) {
				return false
			}
		}
		return true
	}, transition, 20*time.Millisecond, "not every circuit opened")
}

// waitHandedOff waits for the breaker's handoff: every entry kept with its
// original, marked handed off, no bypass marker, failurePolicy Ignore.
func (f *fourCircuits) waitHandedOff() *admissionregistrationv1.MutatingWebhookConfiguration {
	f.t.Helper()
	var mwc *admissionregistrationv1.MutatingWebhookConfiguration
	require.Eventually(f.t, func() bool {
		mwc = f.get()
		rec, err := circuit.Decode(mwc.Annotations)
		if err != nil {
			return false
		}
		for _, hook := range f.hooks {
			w := findWebhook(mwc, hook)
			if !rec[hook].HandedOff() || hasMarker(w) || *w.FailurePolicy != admissionregistrationv1.Ignore {
				return false
			}
		}
		return true
	}, transition, 20*time.Millisecond, "the breaker never handed off")
	rec := mustRecord(f.t, mwc)
	for _, hook := range f.hooks {
		assert.Equal(f.t, f.originals[hook].FailurePolicy, rec[hook].OriginalFailurePolicy, "%s: the entry keeps the original", hook)
	}
	return mwc
}

func (f *fourCircuits) waitAllRestored() {
	f.t.Helper()
	require.Eventually(f.t, func() bool {
		mwc := f.get()
		if _, ok := mwc.Annotations[circuit.Annotation]; ok {
			return false
		}
		for _, hook := range f.hooks {
			if !equality.Semantic.DeepEqual(*findWebhook(mwc, hook), f.originals[hook]) {
				return false
			}
		}
		return true
	}, transition, 20*time.Millisecond, "not every original was restored exactly")
}

func (f *fourCircuits) annotate(value string) {
	f.t.Helper()
	arg := circuit.OverrideAnnotation + "-"
	if value != "" {
		arg = circuit.OverrideAnnotation + "=" + value
	}
	r := env.Kubectl(context.Background(), "", nil, "annotate", "mutatingwebhookconfiguration", f.name, arg)
	require.NoError(f.t, r.Err, r.Stderr)
}

// restoredOnce requires that, in the writes after from (a resourceVersion),
// each webhook's fields went from their open value to exactly the original
// in one write, which also removed its record entry, and changed in no
// other write.
func (f *fourCircuits) restoredOnce(from string) {
	f.t.Helper()
	f.writes.waitFor(f.t, from)
	writes := f.writes.transitions()
	start := 0
	for i, w := range writes {
		if w.ResourceVersion == from {
			start = i
		}
	}
	for _, hook := range f.hooks {
		changes := 0
		for i := start + 1; i < len(writes); i++ {
			before, after := findWebhook(writes[i-1], hook), findWebhook(writes[i], hook)
			if equality.Semantic.DeepEqual(before, after) {
				continue
			}
			changes++
			assert.Equal(f.t, f.originals[hook], *after, "%s: not restored byte for byte in write %s", hook, writes[i].ResourceVersion)
			assert.NotContains(f.t, mustRecord(f.t, writes[i]), hook, "%s: its entry outlived the write that restored it", hook)
			assert.Contains(f.t, mustRecord(f.t, writes[i-1]), hook, "%s: its entry went before the write that restored it", hook)
		}
		assert.Equal(f.t, 1, changes, "%s: restored in %d writes", hook, changes)
	}
}

// A handoff of four open circuits keeps every original on the
// configuration. Handed back while the webhooks are healthy, each circuit
// closes to its original, byte for byte, in one write; handed back while
// they still fail, all four stay open, and close once they recover.
func TestHandoff_fourCircuitsKeepTheirOriginalsAndCloseWhenHandedBack(t *testing.T) {
	f := newFourCircuits(t)
	g := f.startGuard()
	slow := harness.Delayed(2*time.Second, harness.Allow())

	t.Run("handed back while healthy", func(t *testing.T) {
		f.setAll(slow)
		f.waitAllOpen()
		f.annotate("incident INC-50: the platform team takes over")
		f.waitHandedOff()
		f.setAll(harness.Allow())
		f.annotate("")
		back := f.get()
		f.waitAllRestored()
		f.restoredOnce(back.ResourceVersion)
	})

	t.Run("handed back while failing", func(t *testing.T) {
		f.setAll(slow)
		f.waitAllOpen()
		f.annotate("incident INC-51")
		f.waitHandedOff()
		f.annotate("")
		back := f.get()
		// Long enough for closeAfter (2) probes of each, and more: had
		// anything closed, it would have.
		probes := map[string]int{}
		for _, hook := range f.hooks {
			probes[hook] = f.wh.Calls(f.paths[hook]) - f.wh.APIServerCalls(f.paths[hook])
		}
		require.Eventually(t, func() bool {
			for _, hook := range f.hooks {
				if f.wh.Calls(f.paths[hook])-f.wh.APIServerCalls(f.paths[hook])-probes[hook] < 6 {
					return false
				}
			}
			return true
		}, transition, 50*time.Millisecond, "the handed-back targets are not probed")
		held := f.get()
		rec := mustRecord(t, held)
		for _, hook := range f.hooks {
			require.Contains(t, rec, hook, "%s: the circuit closed while its webhook still fails", hook)
			assert.Equal(t, admissionregistrationv1.Ignore, *findWebhook(held, hook).FailurePolicy, "%s: held open in Ignore", hook)
		}
		f.setAll(harness.Allow())
		f.waitAllRestored()
		f.restoredOnce(back.ResourceVersion)
	})

	t.Run("guard status shows every kept original, and guard release restores them", func(t *testing.T) {
		f.setAll(slow)
		f.waitAllOpen()
		f.annotate("incident INC-52: uninstalling")
		f.waitHandedOff()
		g.Stop()
		status, release := f.statusAndRelease(context.Background())
		t.Logf("guard status:\n%s\nguard release:\n%s", status, release)
		for _, hook := range f.hooks {
			assert.Contains(t, strings.Join(statusLine(t, status, hook), " "), "original failurePolicy Fail", "%s: guard status does not show its kept original", hook)
			assert.Contains(t, release, hook+": released (failurePolicy Ignore -> Fail", "%s: guard release did not restore it", hook)
		}
		f.waitAllRestored()
	})
}
