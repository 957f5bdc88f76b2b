package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/breaker"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

func init() {
	register("cycles", cycles)
	register("massfailure", massFailure)
}

// massSizes limits the mass failure to one of its sizes (-mass), for
// investigation.
var massSizes = flag.Int("mass", 0, "Run the mass failure at this size only (100 or 1000; 0: both).")

// The fleets' circuit settings (fleet.config): probes every second, open
// after 3 failures, close after 5 successes.
const (
	openAfter  = 3
	closeAfter = 5
	interval   = time.Second
)

// observer watches a fleet's configurations and counts the writes to
// them, until told to wait for all of them to be open or closed. A write
// that changes nothing but the marking's arming entries
// (circuit.ArmingAnnotation) is counted apart from the transitions.
type observer struct {
	mu     sync.Mutex
	state  map[string]*admissionregistrationv1.MutatingWebhookConfiguration
	writes int
	arming int
	// perConfiguration counts the transition writes to each configuration.
	perConfiguration map[string]int
	change           chan struct{}
	stop             func()
}

func observe(ctx context.Context, env *harness.Env, f *fleet) (*observer, error) {
	list, err := env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: "bench=" + f.ns})
	if err != nil {
		return nil, err
	}
	w, err := env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Watch(ctx, metav1.ListOptions{LabelSelector: "bench=" + f.ns, ResourceVersion: list.ResourceVersion})
	if err != nil {
		return nil, err
	}
	o := &observer{state: map[string]*admissionregistrationv1.MutatingWebhookConfiguration{}, perConfiguration: map[string]int{}, change: make(chan struct{}, 1), stop: w.Stop}
	for i := range list.Items {
		o.state[list.Items[i].Name] = &list.Items[i]
	}
	go func() {
		for ev := range w.ResultChan() {
			m, ok := ev.Object.(*admissionregistrationv1.MutatingWebhookConfiguration)
			if !ok || ev.Type != watch.Modified {
				continue
			}
			o.mu.Lock()
			if prev := o.state[m.Name]; prev != nil && onlyArming(prev, m) {
				o.arming++
			} else {
				o.writes++
				o.perConfiguration[m.Name]++
			}
			o.state[m.Name] = m
			o.mu.Unlock()
			select {
			case o.change <- struct{}{}:
			default:
			}
		}
	}()
	return o, nil
}

// writeCounts are the writes an observer counted.
type writeCounts struct {
	// transitions and arming are the transition writes and the writes
	// that changed only the arming entries.
	transitions, arming int
	// most is the most transition writes to one configuration.
	most int
}

// takeWrites returns the writes counted since the last call.
func (o *observer) takeWrites() writeCounts {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := writeCounts{transitions: o.writes, arming: o.arming}
	for _, n := range o.perConfiguration {
		w.most = max(w.most, n)
	}
	o.writes, o.arming = 0, 0
	clear(o.perConfiguration)
	return w
}

// onlyArming reports whether b differs from a in the arming entries
// alone.
func onlyArming(a, b *admissionregistrationv1.MutatingWebhookConfiguration) bool {
	without := func(m map[string]string) map[string]string {
		c := maps.Clone(m)
		delete(c, circuit.ArmingAnnotation)
		return c
	}
	return a.Annotations[circuit.ArmingAnnotation] != b.Annotations[circuit.ArmingAnnotation] &&
		equality.Semantic.DeepEqual(without(a.Annotations), without(b.Annotations)) &&
		equality.Semantic.DeepEqual(a.Webhooks, b.Webhooks)
}

// waitAll waits until every webhook of every configuration is open
// (failurePolicy Ignore) or closed (Fail, and no record left), and
// returns when it saw that.
func (o *observer) waitAll(ctx context.Context, open bool, timeout time.Duration) (time.Time, error) {
	deadline := time.After(timeout)
	for {
		o.mu.Lock()
		done := true
		for _, m := range o.state {
			if !allAre(m, open) {
				done = false
				break
			}
		}
		o.mu.Unlock()
		if done {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-deadline:
			return time.Time{}, fmt.Errorf("not all %s after %s", map[bool]string{true: "open", false: "closed"}[open], timeout)
		case <-o.change:
		}
	}
}

func allAre(m *admissionregistrationv1.MutatingWebhookConfiguration, open bool) bool {
	if !open && m.Annotations[circuit.Annotation] != "" {
		return false
	}
	for _, w := range m.Webhooks {
		if (*w.FailurePolicy == admissionregistrationv1.Ignore) != open {
			return false
		}
	}
	return true
}

// transition turns the fleet failing (or healthy again) and measures how
// long until every circuit is open (closed), and the writes that took:
// the transitions', and the arming writes (an opening's arming, and the
// disarming of an earlier closing if it landed meanwhile).
func transition(ctx context.Context, o *observer, f *fleet, failing bool, timeout time.Duration) (seconds float64, w writeCounts, err error) {
	o.takeWrites()
	start := time.Now()
	f.failing.Store(failing)
	at, err := o.waitAll(ctx, failing, timeout)
	if err != nil {
		return 0, writeCounts{}, err
	}
	// Let a late duplicate write, if any, be counted.
	time.Sleep(interval)
	return at.Sub(start).Seconds(), o.takeWrites(), nil
}

// disarmSettle is how long after the last closing the breaker's
// disarming writes have landed (it disarms 2 s after a closing).
const disarmSettle = 3 * time.Second

// cycles opens and closes one webhook's circuit ten times per run.
func cycles(ctx context.Context, b *Bench) ([]Row, error) {
	env, err := b.Env()
	if err != nil {
		return nil, err
	}
	const n = 10
	f, err := newFleet(ctx, env, "url", 1)
	if err != nil {
		return nil, err
	}
	defer f.delete(ctx, env)
	var openS, closeS, openW, closeW, armW []float64
	for range b.Runs {
		r, err := startGuard(ctx, env, f, "Bypass", 3, 0, true)
		if err != nil {
			return nil, err
		}
		if err := r.waitServing(ctx); err != nil {
			r.stop()
			return nil, err
		}
		o, err := observe(ctx, env, f)
		if err != nil {
			r.stop()
			return nil, err
		}
		time.Sleep(3 * interval)
		var opens, closes, ow, cw []float64
		arming := 0
		for range n {
			s, w, err := transition(ctx, o, f, true, time.Minute)
			arming += w.arming
			if err == nil {
				opens, ow = append(opens, s), append(ow, float64(w.transitions))
				s, w, err = transition(ctx, o, f, false, time.Minute)
				closes, cw = append(closes, s), append(cw, float64(w.transitions))
				arming += w.arming
			}
			if err != nil {
				o.stop()
				r.stop()
				return nil, fmt.Errorf("%w\n%s", err, r.g.Logs())
			}
		}
		time.Sleep(disarmSettle)
		arming += o.takeWrites().arming
		o.stop()
		r.stop()
		openS, closeS = append(openS, median(opens)), append(closeS, median(closes))
		openW, closeW = append(openW, median(ow)), append(closeW, median(cw))
		armW = append(armW, float64(arming)/n)
	}
	name := fmt.Sprintf("1 webhook, Bypass, %d cycles per run", n)
	note := fmt.Sprintf("probes every %s, open after %d failures, close after %d successes; opening includes the marking canary", interval, openAfter, closeAfter)
	return []Row{
		Row{Section: "transitions", Case: name, Metric: "time to open, median (s)", Runs: openS, Note: note}.AtMost(float64(openAfter)*interval.Seconds() + 1),
		{Section: "transitions", Case: name, Metric: "time to close, median (s)", Runs: closeS},
		Row{Section: "transitions", Case: name, Metric: "writes per opening", Runs: openW}.AtMost(1),
		Row{Section: "transitions", Case: name, Metric: "writes per closing", Runs: closeW}.AtMost(1),
		Row{Section: "transitions", Case: name, Metric: "arming writes per cycle", Runs: armW,
			Note: "marking armed before each opening and disarmed 2 s after each closing, each in a write that changes only the arming entries"}.AtMost(2),
	}, nil
}

// massCase is one way of running the mass failure: the guard's settings
// and how the webhooks fail.
type massCase struct {
	// name is the case's name in -mass-cases and in the table.
	name string
	mode string
	// defaults leaves every circuit setting at its default (fleet.defaults)
	// and makes the webhooks hang (fleet.hang).
	defaults bool
	// hold is holdWhenAllFail where defaults is false.
	hold int
	// differs says which settings differ from the defaults, for the table.
	differs string
}

// massCases are the mass failure's cases, in the table's order: the
// guard as tuned for the transitions' bench, then every default, as a
// user gets it.
var massCases = []massCase{
	{name: "tuned", mode: "Ignore",
		differs: "differs from the defaults: holdWhenAllFail 0 (off), probe.timeout 1s; webhooks answer HTTP 500 at once"},
	{name: "held", mode: "Ignore", hold: config.DefaultHoldWhenAllFail,
		differs: "differs from the defaults: probe.timeout 1s; holdWhenAllFail at its default; webhooks answer HTTP 500 at once"},
	{name: "defaults", mode: "Ignore", defaults: true,
		differs: "every default (holdWhenAllFail 3, openAfter 3, closeAfter 5, probe every 1s, probe timeout the webhooks' timeoutSeconds 1); webhooks hang"},
	{name: "defaults-bypass", mode: "Bypass", defaults: true,
		differs: "differs from the defaults: mode Bypass; every other setting at its default; webhooks hang"},
}

// massCaseNames limits the mass failure to some of its cases
// (-mass-cases), for investigation.
var massCaseNames = flag.String("mass-cases", "", "Comma-separated mass failure cases to run (default all): tuned, held, defaults, defaults-bypass.")

// massFailure makes every webhook of a fleet fail at once, then recover,
// inside the Deployment's CPU limit, in each massCase.
func massFailure(ctx context.Context, b *Bench) ([]Row, error) {
	env, limit, err := b.LimitedEnv()
	if err != nil {
		return nil, err
	}
	var rows []Row
	for _, n := range []int{100, 1000} {
		if *massSizes != 0 && n != *massSizes {
			continue
		}
		for _, c := range massCases {
			if *massCaseNames != "" && !slices.Contains(strings.Split(*massCaseNames, ","), c.name) {
				continue
			}
			r, err := massFailureCase(ctx, b, env, limit, n, c)
			rows = append(rows, r...)
			if err != nil {
				return rows, err
			}
		}
	}
	return rows, nil
}

// massFailureCase measures the mass failure of n webhooks in case c.
func massFailureCase(ctx context.Context, b *Bench, env *harness.Env, limit float64, n int, c massCase) ([]Row, error) {
	f, err := newFleet(ctx, env, "url", n)
	if err != nil {
		return nil, err
	}
	defer f.delete(ctx, env)
	f.hang, f.defaults = c.defaults, c.defaults
	var openS, closeS, openW, closeW, openMost, closeMost, conflicts, created, arming, cores, throttled []float64
	for range b.Runs {
		// holdWhenAllFail 0 in the tuned case: every target of the guard
		// fails at once here, which the hold takes for the guard's own
		// network, for at most its bound.
		r, err := startGuard(ctx, env, f, c.mode, c.hold, limit, true)
		if err != nil {
			return nil, err
		}
		res, err := massRun(ctx, env, f, r)
		r.stop()
		if err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", c.name, err, r.g.Logs())
		}
		say("mass failure %d %s: all open after %.2f s, closed after %.2f s, %.3f cores", n, c.name, res.openS, res.closeS, res.openCores)
		openS, closeS = append(openS, res.openS), append(closeS, res.closeS)
		openW, closeW = append(openW, float64(res.open.transitions)), append(closeW, float64(res.close.transitions))
		openMost, closeMost = append(openMost, float64(res.open.most)), append(closeMost, float64(res.close.most))
		conflicts, created = append(conflicts, res.conflicts), append(created, float64(res.created))
		arming = append(arming, float64(res.open.arming+res.close.arming+res.disarm))
		cores, throttled = append(cores, res.openCores), append(throttled, 100*res.openThrottled)
	}
	name := fmt.Sprintf("%d webhooks in %d configurations, %s", n, len(f.configs), c.mode)
	switch {
	case c.defaults:
		name += ", every other default"
	case c.hold > 0:
		name += ", tuned but the hold"
	default:
		name += ", tuned"
	}
	// The goals: 4 s at 100 webhooks (openAfter intervals and
	// one more), 10 s at 1,000. With the default hold, its bound more.
	openGoal := float64(openAfter)*interval.Seconds() + 1
	if c.defaults || c.hold > 0 {
		openGoal += breaker.HoldBoundIntervals * interval.Seconds()
	}
	if n >= 1000 {
		openGoal = 10
	}
	closeGoal := float64(closeAfter)*interval.Seconds() + 2
	note := fmt.Sprintf("inside the Deployment's %.2g-core limit; %s; openings share canaries for their marking policies (one at a time, at least 250 ms apart)", limit, c.differs)
	return []Row{
		Row{Section: "mass failure", Case: name, Metric: "all open after (s)", Runs: openS, Note: note}.AtMost(openGoal),
		Row{Section: "mass failure", Case: name, Metric: "all closed after (s)", Runs: closeS}.AtMost(closeGoal),
		Row{Section: "mass failure", Case: name, Metric: "writes to open all", Runs: openW}.AtMost(float64(len(f.configs)) * 1.1),
		Row{Section: "mass failure", Case: name, Metric: "writes to close all", Runs: closeW}.AtMost(float64(len(f.configs)) * 1.1),
		Row{Section: "mass failure", Case: name, Metric: "most transition writes to one configuration, opening", Runs: openMost,
			Note: "transitions of one configuration that come within one probe interval go in one write"}.AtMost(1),
		Row{Section: "mass failure", Case: name, Metric: "most transition writes to one configuration, closing", Runs: closeMost}.AtMost(1),
		Row{Section: "mass failure", Case: name, Metric: "arming writes, opening and closing all", Runs: arming,
			Note: "one before the openings and one 2 s after the closings, per configuration"}.AtMost(float64(len(f.configs)) * 2 * 1.1),
		{Section: "mass failure", Case: name, Metric: "write conflicts", Runs: conflicts},
		Row{Section: "mass failure", Case: name, Metric: "guard CPU while opening (cores)", Runs: cores}.AtMost(limit),
		{Section: "mass failure", Case: name, Metric: "CFS periods in which the guard's quota ran out, while opening (%)", Runs: throttled},
		Row{Section: "mass failure", Case: name, Metric: "admission policy objects created while opening", Runs: created,
			Note: "the marking policies are installed beforehand; before, the service created 2 per mutating webhook"}.AtMost(0),
	}, nil
}

// massResult is what massRun measures.
type massResult struct {
	// openS and closeS are the seconds to all open and to all closed.
	openS, closeS float64
	// open and close are the writes of each; disarm the arming writes
	// that landed after the closings were seen.
	open, close writeCounts
	disarm      int
	// conflicts are the guard's write conflicts over the run.
	conflicts float64
	// created are the admission policy objects created while opening.
	created int
	// openCores is the guard's CPU while opening, in cores, and
	// openThrottled the share of CFS periods meanwhile in which its quota
	// ran out.
	openCores, openThrottled float64
}

// startUsage starts measuring the guard's CPU, in cores, and the share of
// CFS periods in which its cgroup's quota ran out; the function it
// returns gives both since then (the cores are NaN once the guard has
// exited).
func (r *guardRun) startUsage() func() (cores, throttled float64) {
	start := time.Now()
	cpu0, _ := cpuSeconds(r.g.Pid())
	var p0, t0 float64
	if r.cg != nil {
		p0, t0 = r.cg.throttled()
	}
	return func() (float64, float64) {
		cores := math.NaN() // the guard exited: its CPU is no longer known
		if cpu1, err := cpuSeconds(r.g.Pid()); err == nil {
			cores = (cpu1 - cpu0) / time.Since(start).Seconds()
		}
		if r.cg == nil {
			return cores, 0
		}
		p1, t1 := r.cg.throttled()
		if p1 <= p0 {
			return cores, 0
		}
		return cores, (t1 - t0) / (p1 - p0)
	}
}

// massRun measures one failure and recovery of every webhook of f:
// seconds to all open, to all closed, writes for each, and conflicts.
func massRun(ctx context.Context, env *harness.Env, f *fleet, r *guardRun) (massResult, error) {
	var out massResult
	if err := r.waitServing(ctx); err != nil {
		return out, err
	}
	time.Sleep(warmUp)
	m0, err := r.metrics(ctx)
	if err != nil {
		return out, err
	}
	o, err := observe(ctx, env, f)
	if err != nil {
		return out, err
	}
	defer o.stop()
	if r.pprofAddr != "" {
		go func() { _ = r.profile(ctx, r.g.Name+"-opening", 20*time.Second) }()
		go func() { _ = apiserverProfile(ctx, env, r.g.Name+"-opening", 20*time.Second) }()
	}
	before, err := admissionPolicyObjects(ctx, env)
	if err != nil {
		return out, err
	}
	usage := r.startUsage()
	req0, _ := apiserverRequests(ctx, env)
	out.openS, out.open, err = transition(ctx, o, f, true, 2*time.Minute)
	out.openCores, out.openThrottled = usage()
	if req1, rerr := apiserverRequests(ctx, env); rerr == nil {
		logRequests("while opening", req0, req1)
	}
	if err != nil {
		return out, fmt.Errorf("%w (meanwhile the guard used %.2f cores, and its quota ran out in %.0f%% of CFS periods)", err, out.openCores, 100*out.openThrottled)
	}
	after, err := admissionPolicyObjects(ctx, env)
	if err != nil {
		return out, err
	}
	out.created = after - before
	if out.closeS, out.close, err = transition(ctx, o, f, false, 2*time.Minute); err != nil {
		return out, fmt.Errorf("all opened after %.2f s, using %.2f cores; then %w", out.openS, out.openCores, err)
	}
	time.Sleep(disarmSettle)
	out.disarm = o.takeWrites().arming
	m1, err := r.metrics(ctx)
	if err != nil {
		return out, err
	}
	out.conflicts = m1["webhook_guard_write_conflicts_total"] - m0["webhook_guard_write_conflicts_total"]
	return out, nil
}

// logRequests prints the kube-apiserver requests counted between a and
// b, most first.
func logRequests(when string, a, b map[string]float64) {
	type kv struct {
		k string
		v float64
	}
	var d []kv
	for k, v := range b {
		if n := v - a[k]; n > 0 {
			d = append(d, kv{k, n})
		}
	}
	sort.Slice(d, func(i, j int) bool { return d[i].v > d[j].v })
	var parts []string
	for _, x := range d[:min(len(d), 12)] {
		parts = append(parts, fmt.Sprintf("%s: %.0f", x.k, x.v))
	}
	fmt.Fprintf(os.Stderr, "bench: kube-apiserver requests %s: %s\n", when, strings.Join(parts, ", "))
}

// admissionPolicyObjects counts the MutatingAdmissionPolicies and their
// bindings in the cluster.
func admissionPolicyObjects(ctx context.Context, env *harness.Env) (int, error) {
	if !*withMarking {
		return 0, nil // not served
	}
	policies := &admissionregistrationv1.MutatingAdmissionPolicyList{}
	bindings := &admissionregistrationv1.MutatingAdmissionPolicyBindingList{}
	for _, l := range []client.ObjectList{policies, bindings} {
		if err := env.Client.List(ctx, l); err != nil {
			return 0, fmt.Errorf("counting admission policies: %w", err)
		}
	}
	return len(policies.Items) + len(bindings.Items), nil
}
