package main

import (
	"context"
	"flag"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// sizes are the fleet sizes of the scale table (-sizes).
var (
	sizes    = flag.String("sizes", "10,100,1000", "Comma-separated numbers of targets for the scale table.")
	withLoad = flag.Bool("load", true, "Also measure the largest url fleet with one core busy elsewhere.")
	kinds    = flag.String("kinds", "url,service", "Comma-separated fleet kinds of the scale table: url, service.")
)

func init() {
	register("scale", scale)
	register("starvation", starvation)
}

// Steady-state windows: the guard starts, its probes spread over the
// first interval and its caches fill during warmUp; window is measured.
const (
	warmUp = 10 * time.Second
	window = 30 * time.Second
)

// window is what one steady-state window of a guard measured.
type steady struct {
	cores, cpuPerProbeMs, rss, anon, onTime, probes, failures, unknown, openings, requests, throttled float64
}

// measureWindow measures r over window after warmUp.
func measureWindow(ctx context.Context, r *guardRun) (steady, error) {
	if err := r.waitServing(ctx); err != nil {
		return steady{}, err
	}
	select {
	case <-ctx.Done():
		return steady{}, ctx.Err()
	case <-time.After(warmUp):
	}
	m0, err := r.metrics(ctx)
	if err != nil {
		return steady{}, fmt.Errorf("%w\n%s", err, r.g.Logs())
	}
	cpu0, err := cpuSeconds(r.g.Pid())
	if err != nil {
		return steady{}, err
	}
	var p0, t0 float64
	if r.cg != nil {
		p0, t0 = r.cg.throttled()
	}
	start := time.Now()
	if err := r.profile(ctx, r.g.Name, window-time.Second); err != nil {
		return steady{}, err
	}
	select {
	case <-ctx.Done():
		return steady{}, ctx.Err()
	case <-time.After(window - time.Since(start)):
	}
	cpu1, err := cpuSeconds(r.g.Pid())
	if err != nil {
		return steady{}, err
	}
	elapsed := time.Since(start).Seconds()
	m1, err := r.metrics(ctx)
	if err != nil {
		return steady{}, err
	}
	rss, anon, err := rssMiB(r.g.Pid())
	if err != nil {
		return steady{}, err
	}
	d := func(name string) float64 { return m1[name] - m0[name] }
	s := steady{
		cores:    (cpu1 - cpu0) / elapsed,
		rss:      rss,
		anon:     anon,
		probes:   d("webhook_guard_probe_duration_seconds_count"),
		failures: d("webhook_guard_probe_failures_total"),
		unknown:  d("webhook_guard_probe_unknown_total"),
		openings: m1["webhook_guard_circuit_openings_total"],
		requests: d("rest_client_requests_total") / elapsed,
	}
	if n := d("webhook_guard_probe_lateness_seconds_count"); n > 0 {
		s.onTime = 100 * d("webhook_guard_probe_lateness_seconds_bucket_le_0.1") / n
	}
	if s.probes > 0 {
		s.cpuPerProbeMs = 1000 * (cpu1 - cpu0) / s.probes
	}
	if r.cg != nil {
		p1, t1 := r.cg.throttled()
		if p1 > p0 {
			s.throttled = 100 * (t1 - t0) / (p1 - p0)
		}
	}
	return s, nil
}

// scale runs the guard over 10, 100 and 1,000 healthy webhooks, by URL
// and by Service, inside the Deployment's CPU limit, and at 1,000 by URL
// once more against a competing load of one busy core.
func scale(ctx context.Context, b *Bench) ([]Row, error) {
	env, limit, err := b.LimitedEnv()
	if err != nil {
		return nil, err
	}
	cells, err := scaleCells()
	if err != nil {
		return nil, err
	}
	var rows []Row
	for _, c := range cells {
		say("scale: %s", c.name())
		runs, err := measureScaleCell(ctx, env, c, limit, b.Runs)
		if err != nil {
			return rows, err
		}
		rows = append(rows, scaleRows(c, runs, limit)...)
	}
	return rows, nil
}

// scaleCell is one fleet of the scale table.
type scaleCell struct {
	kind string
	n    int
	// load is one core busy elsewhere while measured.
	load bool
}

func (c scaleCell) name() string {
	name := fmt.Sprintf("%d %s targets", c.n, c.kind)
	if c.load {
		name += ", 1 core busy elsewhere"
	}
	return name
}

// scaleCells are the cells -kinds, -sizes and -load ask for.
func scaleCells() ([]scaleCell, error) {
	var cells []scaleCell
	for _, kind := range strings.Split(*kinds, ",") {
		if kind != "url" && kind != "service" {
			return nil, fmt.Errorf("-kinds: %q is neither url nor service", kind)
		}
		for _, v := range strings.Split(*sizes, ",") {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("-sizes: %q is not a number of targets", v)
			}
			cells = append(cells, scaleCell{kind, n, false})
			if kind == "url" && n >= 1000 && *withLoad {
				cells = append(cells, scaleCell{kind, n, true})
			}
		}
	}
	return cells, nil
}

// measureScaleCell creates c's fleet, measures a guard over it runs
// times (a fresh guard each time) and deletes the fleet.
func measureScaleCell(ctx context.Context, env *harness.Env, c scaleCell, limit float64, runs int) ([]steady, error) {
	f, err := newFleet(ctx, env, c.kind, c.n)
	if err != nil {
		return nil, err
	}
	defer f.delete(ctx, env)
	var out []steady
	for range runs {
		var stopLoad func()
		if c.load {
			stopLoad = busyCore()
		}
		r, err := startGuard(ctx, env, f, "Ignore", 3, limit, true)
		if err != nil {
			if stopLoad != nil {
				stopLoad()
			}
			return nil, err
		}
		s, err := measureWindow(ctx, r)
		r.stop()
		if stopLoad != nil {
			stopLoad()
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// scaleRows are c's rows, one value per run.
func scaleRows(c scaleCell, runs []steady, limit float64) []Row {
	name := c.name()
	col := func(get func(steady) float64) []float64 {
		var out []float64
		for _, s := range runs {
			out = append(out, get(s))
		}
		return out
	}
	row := func(metric, unit string, get func(steady) float64) Row {
		return Row{Section: "scale", Case: name, Metric: metric, Unit: unit, Runs: col(get)}
	}
	cores := row("guard CPU (cores)", "", func(s steady) float64 { return s.cores })
	rss := row("guard RSS (MiB)", "", func(s steady) float64 { return s.rss })
	anon := row("guard anonymous RSS (MiB)", "", func(s steady) float64 { return s.anon })
	anon.Note = "RssAnon: the resident memory the kernel cannot drop under the memory limit (the rest is mostly the binary's own pages)"
	if c.n == 1000 {
		cores = cores.AtMost(0.1)
		rss = rss.AtMost(100)
		if mem, err := deploymentMemoryLimitMiB(); err == nil {
			anon = anon.AtMost(0.6 * mem) // the goal: 60% of the shipped limit
		}
	}
	cores.Note = fmt.Sprintf("inside a %.2g-core CFS quota (the Deployment's limit); throttled in %s%% of periods", limit, format(median(col(func(s steady) float64 { return s.throttled }))))
	return []Row{
		cores,
		row("CPU per probe (ms)", "", func(s steady) float64 { return s.cpuPerProbeMs }),
		rss,
		anon,
		row("probes on time (%, ≤ 100 ms late)", "", func(s steady) float64 { return s.onTime }).AtLeast(99),
		row("failed or unknown probes, circuits opened", "", func(s steady) float64 { return s.failures + s.unknown + s.openings }).AtMost(0),
		Row{Section: "scale", Case: name, Metric: "apiserver requests/s from the guard, all targets", Runs: col(func(s steady) float64 { return s.requests }),
			Note: "Lease renewals and one read of kube-apiserver's /metrics per interval; none per probe (one GET per service-backed probe would add the probe rate)"}.AtMost(2),
	}
}

// starvation runs 1,000 healthy webhooks with a 1 s probe timeout inside a
// CPU limit far below what they need (about 0.2 core): probes start late,
// handshakes outlast the timeout, and none of that may open a circuit.
// So starved, the guard cannot answer its metrics endpoint in time, so
// this reads the outcome from the objects (any opening is on them) and
// from the guard's log (each Unknown probe is logged at info level). The
// guard runs without leader election here: so starved, a leader misses
// its renew deadline and exits, as it should, and a replacement would
// take over.
func starvation(ctx context.Context, b *Bench) ([]Row, error) {
	env, err := b.Env()
	if err != nil {
		return nil, err
	}
	const quota = 0.05
	const starved = time.Minute
	f, err := newFleet(ctx, env, "url", 1000)
	if err != nil {
		return nil, err
	}
	defer f.delete(ctx, env)
	var opened, unknown, alive []float64
	for range b.Runs {
		r, err := startGuard(ctx, env, f, "Ignore", 3, quota, false)
		if err != nil {
			return nil, err
		}
		if r.cg == nil {
			r.stop()
			return nil, fmt.Errorf("the starvation case needs a CPU limit")
		}
		select {
		case <-ctx.Done():
			r.stop()
			return nil, ctx.Err()
		case <-time.After(starved):
		}
		exited, _ := r.g.Exited()
		n, err := f.opened(ctx, env)
		r.stop()
		if err != nil {
			return nil, err
		}
		opened = append(opened, float64(n))
		unknown = append(unknown, float64(r.g.CountLogLines("Probe could not run")))
		alive = append(alive, map[bool]float64{true: 0, false: 1}[exited])
	}
	name := fmt.Sprintf("1000 url targets, %.2g-core limit, %s, no leader election", quota, starved)
	return []Row{
		{Section: "starvation", Case: name, Metric: "probes Unknown (guard too slow), from its log", Runs: unknown},
		Row{Section: "starvation", Case: name, Metric: "guard still running (1 = yes)", Runs: alive}.AtLeast(1),
		Row{Section: "starvation", Case: name, Metric: "circuits opened, on the objects", Runs: opened}.AtMost(0),
	}, nil
}

// busyCore keeps one core busy in another process until stopped.
func busyCore() func() {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		say("no competing load: %v", err)
		return func() {}
	}
	return func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}
