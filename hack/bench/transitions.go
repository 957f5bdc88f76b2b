package main

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
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
// them, until told to wait for all of them to be open or closed.
type observer struct {
	mu     sync.Mutex
	state  map[string]*admissionregistrationv1.MutatingWebhookConfiguration
	writes int
	change chan struct{}
	stop   func()
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
	o := &observer{state: map[string]*admissionregistrationv1.MutatingWebhookConfiguration{}, change: make(chan struct{}, 1), stop: w.Stop}
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
			o.state[m.Name] = m
			o.writes++
			o.mu.Unlock()
			select {
			case o.change <- struct{}{}:
			default:
			}
		}
	}()
	return o, nil
}

// takeWrites returns the writes counted since the last call.
func (o *observer) takeWrites() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.writes
	o.writes = 0
	return n
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
// long until every circuit is open (closed), and the writes that took.
func transition(ctx context.Context, o *observer, f *fleet, failing bool, timeout time.Duration) (seconds float64, writes int, err error) {
	o.takeWrites()
	start := time.Now()
	f.failing.Store(failing)
	at, err := o.waitAll(ctx, failing, timeout)
	if err != nil {
		return 0, 0, err
	}
	// Let a late duplicate write, if any, be counted.
	time.Sleep(interval)
	return at.Sub(start).Seconds(), o.takeWrites(), nil
}

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
	var openS, closeS, openW, closeW []float64
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
		for range n {
			s, w, err := transition(ctx, o, f, true, time.Minute)
			if err == nil {
				opens, ow = append(opens, s), append(ow, float64(w))
				s, w, err = transition(ctx, o, f, false, time.Minute)
				closes, cw = append(closes, s), append(cw, float64(w))
			}
			if err != nil {
				o.stop()
				r.stop()
				return nil, fmt.Errorf("%w\n%s", err, r.g.Logs())
			}
		}
		o.stop()
		r.stop()
		openS, closeS = append(openS, median(opens)), append(closeS, median(closes))
		openW, closeW = append(openW, median(ow)), append(closeW, median(cw))
	}
	name := fmt.Sprintf("1 webhook, Bypass, %d cycles per run", n)
	note := fmt.Sprintf("probes every %s, open after %d failures, close after %d successes; opening includes the marking canary", interval, openAfter, closeAfter)
	return []Row{
		Row{Section: "transitions", Case: name, Metric: "time to open, median (s)", Runs: openS, Note: note}.AtMost(float64(openAfter)*interval.Seconds() + 1),
		{Section: "transitions", Case: name, Metric: "time to close, median (s)", Runs: closeS},
		Row{Section: "transitions", Case: name, Metric: "writes per opening", Runs: openW}.AtMost(1),
		Row{Section: "transitions", Case: name, Metric: "writes per closing", Runs: closeW}.AtMost(1),
	}, nil
}

// massFailure makes every webhook of a fleet fail at once, then recover,
// inside the Deployment's CPU limit.
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
		f, err := newFleet(ctx, env, "url", n)
		if err != nil {
			return rows, err
		}
		var openS, closeS, openW, closeW, conflicts, created []float64
		for range b.Runs {
			// holdWhenAllFail 0: every target of the guard fails at once
			// here, which the default hold would take for the guard's own
			// network.
			r, err := startGuard(ctx, env, f, "Ignore", 0, limit, true)
			if err != nil {
				f.delete(ctx, env)
				return rows, err
			}
			res, err := massRun(ctx, env, f, r)
			r.stop()
			if err != nil {
				f.delete(ctx, env)
				return rows, fmt.Errorf("%w\n%s", err, r.g.Logs())
			}
			openS, closeS = append(openS, res[0]), append(closeS, res[1])
			openW, closeW, conflicts = append(openW, res[2]), append(closeW, res[3]), append(conflicts, res[4])
			created = append(created, res[5])
		}
		f.delete(ctx, env)
		name := fmt.Sprintf("%d webhooks in %d configurations, Ignore", n, len(f.configs))
		rows = append(rows,
			Row{Section: "mass failure", Case: name, Metric: "all open after (s)", Runs: openS,
				Note: fmt.Sprintf("inside the Deployment's %.2g-core limit; each opening first sends one canary for its marking policies", limit)}.AtMost(float64(openAfter)*interval.Seconds()+1),
			Row{Section: "mass failure", Case: name, Metric: "all closed after (s)", Runs: closeS}.AtMost(float64(closeAfter)*interval.Seconds()+1),
			Row{Section: "mass failure", Case: name, Metric: "writes to open all", Runs: openW}.AtMost(float64(len(f.configs))*1.1),
			Row{Section: "mass failure", Case: name, Metric: "writes to close all", Runs: closeW},
			Row{Section: "mass failure", Case: name, Metric: "write conflicts", Runs: conflicts},
			Row{Section: "mass failure", Case: name, Metric: "admission policy objects created while opening", Runs: created,
				Note: "the marking policies are installed beforehand; before, the service created 2 per mutating webhook"}.AtMost(0),
		)
	}
	return rows, nil
}

// massRun measures one failure and recovery of every webhook of f:
// seconds to all open, to all closed, writes for each, and conflicts.
func massRun(ctx context.Context, env *harness.Env, f *fleet, r *guardRun) ([6]float64, error) {
	var out [6]float64
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
	}
	before, err := admissionPolicyObjects(ctx, env)
	if err != nil {
		return out, err
	}
	openS, openW, err := transition(ctx, o, f, true, 2*time.Minute)
	if err != nil {
		return out, err
	}
	after, err := admissionPolicyObjects(ctx, env)
	if err != nil {
		return out, err
	}
	closeS, closeW, err := transition(ctx, o, f, false, 2*time.Minute)
	if err != nil {
		return out, err
	}
	m1, err := r.metrics(ctx)
	if err != nil {
		return out, err
	}
	return [6]float64{openS, closeS, float64(openW), float64(closeW), m1["webhook_guard_write_conflicts_total"] - m0["webhook_guard_write_conflicts_total"], float64(after - before)}, nil
}

// admissionPolicyObjects counts the MutatingAdmissionPolicies and their
// bindings in the cluster.
func admissionPolicyObjects(ctx context.Context, env *harness.Env) (int, error) {
	policies := &admissionregistrationv1.MutatingAdmissionPolicyList{}
	bindings := &admissionregistrationv1.MutatingAdmissionPolicyBindingList{}
	for _, l := range []client.ObjectList{policies, bindings} {
		if err := env.Client.List(ctx, l); err != nil {
			return 0, fmt.Errorf("counting admission policies: %w", err)
		}
	}
	return len(policies.Items) + len(bindings.Items), nil
}
