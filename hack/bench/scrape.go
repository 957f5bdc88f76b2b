package main

// The "scrape" section: what one read of kube-apiserver's /metrics (the
// apiserver signal) costs the apiserver and the guard, on a control plane
// that looks like a real cluster's: 200 CRDs whose resources were
// created, read, listed and watched, and 1,000 webhook names the
// apiserver has called. Several ways of asking for the same counters run
// side by side, in one run, order rotated per run.
//
// The apiserver's CPU is /proc/<pid>/stat (user+sys) over a burst of
// back-to-back scrapes, less its idle rate over the window just before;
// the guard's is getrusage of this process (the scrape, TLS, any gunzip
// and the parse run here, as in the guard), less its own idle rate. Per
// scrape, it is also the core a scrape a second costs.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/webhook-guard/webhook-guard/internal/apimetrics"
	"github.com/webhook-guard/webhook-guard/internal/breaker"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

var (
	scrapeCRDs     = flag.Int("scrape-crds", 200, "CRDs installed for the scrape section.")
	scrapeWebhooks = flag.Int("scrape-webhooks", 1000, "Webhook names the apiserver calls once before the scrape section measures.")
	scrapeBurst    = flag.Int("scrape-burst", 20, "Scrapes per way and run in the scrape section.")
	scrapePaced    = flag.Bool("scrape-paced", false, "Scrape once a second, as the guard does, instead of back to back (slower, noisier).")
	scrapeProfile  = flag.String("scrape-profile", "", "After the scrape section's runs, write kube-apiserver's CPU profile over 20 s of back-to-back scrapes (the way after) to this file.")
	scrapeAt       = flag.Duration("scrape-at", 30*time.Second, "The scrape interval proposed as the default: the scrape section also gives the cores at it.")
	scrapeIdle     = flag.Duration("scrape-idle", 5*time.Second, "Idle window before each burst, for the apiserver's and this process's idle CPU.")
)

func init() {
	register("scrape", scrapeCost)
}

const (
	// scrapeTargets is how many of the called webhooks the guard asks
	// for, as with 10 targets.
	scrapeTargets = 10
	// scrapeObjects is how many objects of each CRD are created.
	scrapeObjects = 3
	// scrapeGroupSuffix names the CRDs' groups and labels them.
	scrapeGroupSuffix = "scrape.bench.webhook-guard.io"
	scrapeNamespace   = "scrape-bench"
	// scrapeHookNamespace is the only namespace the 1,000 webhooks match.
	scrapeHookNamespace = "scrape-bench-hooks"
	scrapeHookPath      = "/scrape-bench"
	scrapeHooksPerMWC   = 100

	textAccept  = "text/plain;version=0.0.4"
	protoAccept = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"
)

// scrapeWay is one way of reading the same counters: a request, and what
// the guard does with the answer.
type scrapeWay struct {
	name string
	// note says what is asked and parsed.
	note string
	read func(ctx context.Context) error
}

// scrapeResult is one way's burst in one run, per scrape.
type scrapeResult struct {
	apiserverMs, guardMs float64
	// wallMs are the scrapes' durations, first to last.
	wallMs []float64
}

// The ways of scrapeBench.ways the table compares as before and after.
const (
	scrapeWayBefore = 0
	scrapeWayAfter  = 4
)

func scrapeCost(ctx context.Context, b *Bench) ([]Row, error) {
	s, err := setupScrape(ctx, b)
	if err != nil {
		return nil, err
	}
	defer s.populated.cleanup()
	results, err := s.measure(ctx, b.Runs)
	if err != nil {
		return nil, err
	}
	return s.report(results), nil
}

// scrapeBench is the scrape section's setup: a populated control plane,
// its kube-apiserver's process, and the ways of reading its /metrics.
type scrapeBench struct {
	pid       int
	rc        rest.Interface
	populated *populated
	// counters are the families apimetrics parses, for name[].
	counters []string
	scraper  *apimetrics.Scraper
	ways     []scrapeWay
	sizes    scrapeSizeSet
}

// setupScrape populates the control plane (the caller cleans it up) and
// measures /metrics's sizes.
func setupScrape(ctx context.Context, b *Bench) (_ *scrapeBench, err error) {
	env, err := b.Env()
	if err != nil {
		return nil, err
	}
	s := &scrapeBench{counters: apimetrics.Families(apimetrics.ParseOptions{})}
	if s.pid, err = apiserverPid(env); err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return nil, err
	}
	s.rc = cs.Discovery().RESTClient()
	if s.populated, err = populateControlPlane(ctx, env); err != nil {
		return nil, fmt.Errorf("populating the control plane: %w", err)
	}
	defer func() {
		if err != nil {
			s.populated.cleanup()
		}
	}()
	// A scrape of a loaded 2-core control plane this size can take longer
	// than DefaultScrapeTimeout: the section measures its cost, not its
	// deadline (the wall-clock rows give the time).
	s.scraper = &apimetrics.Scraper{Client: s.rc, Timeout: time.Minute}
	s.ways = s.scrapeWays()
	if s.sizes, err = scrapeSizes(ctx, s.raw, s.counters); err != nil {
		return nil, err
	}
	say("scrape: /metrics is %.2f MB as text (%d lines), %.2f MB gzip, %.2f MB protobuf, %.3f MB with name[]; %d webhook names counted",
		s.sizes.text/1e6, s.sizes.lines, s.sizes.gzip/1e6, s.sizes.proto/1e6, s.sizes.named/1e6, s.sizes.webhooks)
	return s, nil
}

// raw asks for /metrics and returns the answer as sent: setting
// Accept-Encoding keeps net/http from decompressing.
func (s *scrapeBench) raw(ctx context.Context, accept, encoding string, names []string) (io.ReadCloser, error) {
	req := s.rc.Get().AbsPath("/metrics").SetHeader("Accept", accept)
	if encoding != "" {
		req = req.SetHeader("Accept-Encoding", encoding)
	}
	for _, n := range names {
		req = req.Param("name[]", n)
	}
	return req.Stream(ctx)
}

// parse reads an answer of raw with apimetrics.Read, as the guard does.
func (s *scrapeBench) parse(body io.ReadCloser, err error) error {
	if err != nil {
		return err
	}
	defer body.Close()
	sample, err := apimetrics.Read(body, s.populated.want, apimetrics.ParseOptions{})
	return s.allWanted(sample, err)
}

// allWanted fails unless sample has every webhook asked for.
func (s *scrapeBench) allWanted(sample apimetrics.Sample, err error) error {
	if err == nil && len(sample.Webhooks) != len(s.populated.want) {
		err = fmt.Errorf("%d of the %d webhooks asked for in the metrics", len(sample.Webhooks), len(s.populated.want))
	}
	return err
}

// decodeProto asks for every family as delimited protobuf and decodes
// them all with expfmt's decoder.
func (s *scrapeBench) decodeProto(ctx context.Context) error {
	body, err := s.raw(ctx, protoAccept, "identity", nil)
	if err != nil {
		return err
	}
	defer body.Close()
	dec := expfmt.NewDecoder(body, expfmt.NewFormat(expfmt.TypeProtoDelim))
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// scrapeWays are the ways compared; scrapeWayBefore and scrapeWayAfter
// index them.
func (s *scrapeBench) scrapeWays() []scrapeWay {
	return []scrapeWay{
		{"text, gzip, everything (before)", "what the guard asked before: text, net/http's own Accept-Encoding: gzip, every family; today's apimetrics.Read on all of it (the parser before this change cost more: see the apimetrics benchmarks)",
			func(ctx context.Context) error { return s.parse(s.raw(ctx, textAccept, "", nil)) }},
		{"text, identity, everything", "Accept-Encoding: identity, every family; apimetrics.Read on all of it",
			func(ctx context.Context) error { return s.parse(s.raw(ctx, textAccept, "identity", nil)) }},
		{"protobuf, identity, everything", "delimited protobuf, identity, every family; expfmt's decoder on every family (the guard would have to decode them to skip them)",
			s.decodeProto},
		{"text, identity, name[] of 6 families", "Accept-Encoding: identity, name[] of the families apimetrics parses; apimetrics.Read",
			func(ctx context.Context) error { return s.parse(s.raw(ctx, textAccept, "identity", s.counters)) }},
		{"text, gzip, name[] of 6 families (after)", "apimetrics.Scraper.Scrape as it is now: name[] of the families it parses, net/http's own gzip",
			func(ctx context.Context) error { return s.allWanted(s.scraper.Scrape(ctx, s.populated.want)) }},
		{"floor: name[] of no family", "name[]=none: the apiserver gathers every metric and writes none; no way of reading /metrics costs it less",
			func(ctx context.Context) error {
				body, err := s.raw(ctx, textAccept, "identity", []string{"webhook_guard_bench_no_such_family"})
				if err != nil {
					return err
				}
				defer body.Close()
				_, err = io.Copy(io.Discard, body)
				return err
			}},
	}
}

// measure warms every way up, then measures each in each of runs runs,
// interleaved and rotated; results[i] are way i's, by run. With
// -scrape-profile it then profiles kube-apiserver.
func (s *scrapeBench) measure(ctx context.Context, runs int) ([][]scrapeResult, error) {
	for _, w := range s.ways { // warm up every way: connections, pools
		if err := w.read(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", w.name, err)
		}
	}
	results := make([][]scrapeResult, len(s.ways))
	for run := range runs {
		for k := range s.ways {
			i := (run + k) % len(s.ways)
			r, err := measureScrape(ctx, s.pid, s.ways[i])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.ways[i].name, err)
			}
			say("scrape run %d: %s: apiserver %.1f ms, guard %.2f ms per scrape; %.0f ms median, %.0f ms longest", run+1, s.ways[i].name, r.apiserverMs, r.guardMs, median(r.wallMs), slices.Max(r.wallMs))
			results[i] = append(results[i], r)
		}
	}
	if *scrapeProfile != "" {
		if err := profileScrapes(ctx, s.rc, s.ways[scrapeWayAfter]); err != nil {
			return nil, fmt.Errorf("profiling kube-apiserver: %w", err)
		}
	}
	return results, nil
}

// scrapeSection is the table section of the scrape rows.
const scrapeSection = "apiserver signal"

// report is the section's rows: the sizes, each way's costs, and the
// before / after ratios.
func (s *scrapeBench) report(results [][]scrapeResult) []Row {
	setup := fmt.Sprintf("%d CRDs (%d objects each, created, read, updated, listed, watched), %d webhook names called once (%d MutatingWebhookConfigurations, then deleted), %d of them asked for",
		*scrapeCRDs, scrapeObjects, s.sizes.webhooks, (*scrapeWebhooks+scrapeHooksPerMWC-1)/scrapeHooksPerMWC, scrapeTargets)
	mode := fmt.Sprintf("%d scrapes back to back", *scrapeBurst)
	if *scrapePaced {
		mode = fmt.Sprintf("%d scrapes, one a second", *scrapeBurst)
	}
	rows := []Row{
		{Section: scrapeSection, Case: "/metrics, text", Metric: "size", Runs: []float64{s.sizes.text / 1e6}, Unit: " MB",
			Note: fmt.Sprintf("%s; %d lines", setup, s.sizes.lines)},
		{Section: scrapeSection, Case: "/metrics, text, gzip", Metric: "size", Runs: []float64{s.sizes.gzip / 1e6}, Unit: " MB"},
		{Section: scrapeSection, Case: "/metrics, protobuf", Metric: "size", Runs: []float64{s.sizes.proto / 1e6}, Unit: " MB"},
		{Section: scrapeSection, Case: "/metrics?name[]=… (6 families)", Metric: "size", Runs: []float64{s.sizes.named / 1e6}, Unit: " MB"},
	}
	for i, w := range s.ways {
		note := w.note
		if i == 0 {
			note = fmt.Sprintf("%s. Each way: %s after a %s idle window; CPU per scrape is kube-apiserver's /proc/<pid>/stat, or this process's getrusage, over the burst, less its rate in the idle window; ways interleaved, order rotated per run", note, mode, *scrapeIdle)
		}
		rows = append(rows, scrapeWayRows(w.name, note, results[i])...)
		if i == scrapeWayBefore || i == scrapeWayAfter {
			rows = append(rows, scrapeCoreRows(w.name, results[i])...)
		}
	}
	ratio := func(num, den int, apiserver bool) []float64 {
		var out []float64
		for run := range results[num] {
			n, d := results[num][run].guardMs, results[den][run].guardMs
			if apiserver {
				n, d = results[num][run].apiserverMs, results[den][run].apiserverMs
			}
			out = append(out, n/d)
		}
		return out
	}
	return append(rows,
		Row{Section: scrapeSection, Case: "before / after", Metric: "kube-apiserver CPU ratio", Runs: ratio(scrapeWayBefore, scrapeWayAfter, true), Unit: "×", Note: "per run, same run"},
		Row{Section: scrapeSection, Case: "before / after", Metric: "guard CPU ratio", Runs: ratio(scrapeWayBefore, scrapeWayAfter, false), Unit: "×"},
	)
}

// scrapeWayRows are one way's CPU per scrape and durations, by run.
func scrapeWayRows(name, note string, results []scrapeResult) []Row {
	var api, guard, wallMed, wallMax []float64
	for _, r := range results {
		wallMed = append(wallMed, median(r.wallMs))
		wallMax = append(wallMax, slices.Max(r.wallMs))
		api = append(api, r.apiserverMs)
		guard = append(guard, r.guardMs)
	}
	return []Row{
		{Section: scrapeSection, Case: name, Metric: "kube-apiserver CPU per scrape", Runs: api, Unit: " ms", Note: note},
		{Section: scrapeSection, Case: name, Metric: "guard CPU per scrape", Runs: guard, Unit: " ms"},
		{Section: scrapeSection, Case: name, Metric: "scrape duration, median", Runs: wallMed, Unit: " ms"},
		{Section: scrapeSection, Case: name, Metric: "scrape duration, longest", Runs: wallMax, Unit: " ms"},
	}
}

// scrapeCoreRows are the cores one way costs kube-apiserver and the guard
// at breaker.MinScrapeInterval and at -scrape-at, by run.
func scrapeCoreRows(name string, results []scrapeResult) []Row {
	var rows []Row
	for _, every := range []time.Duration{breaker.MinScrapeInterval, *scrapeAt} {
		at := "at " + every.String()
		if every == breaker.MinScrapeInterval {
			at += " (breaker.MinScrapeInterval)"
		}
		apiCores, guardCores := []float64{}, []float64{}
		for _, r := range results {
			apiCores = append(apiCores, r.apiserverMs/1000/every.Seconds())
			guardCores = append(guardCores, r.guardMs/1000/every.Seconds())
		}
		rows = append(rows,
			Row{Section: scrapeSection, Case: name, Metric: "kube-apiserver cores " + at, Runs: apiCores, Unit: " cores"}.AtMost(0.01),
			Row{Section: scrapeSection, Case: name, Metric: "guard cores " + at, Runs: guardCores, Unit: " cores"}.AtMost(0.01),
		)
	}
	return rows
}

// measureScrape reads w *scrapeBurst times after an idle window and
// returns the CPU per scrape of kube-apiserver and of this process.
func measureScrape(ctx context.Context, pid int, w scrapeWay) (scrapeResult, error) {
	api0, err := cpuSeconds(pid)
	if err != nil {
		return scrapeResult{}, err
	}
	self0, idleStart := selfCPU(), time.Now()
	select {
	case <-ctx.Done():
		return scrapeResult{}, ctx.Err()
	case <-time.After(*scrapeIdle):
	}
	api1, err := cpuSeconds(pid)
	if err != nil {
		return scrapeResult{}, err
	}
	self1, start := selfCPU(), time.Now()
	idle := start.Sub(idleStart).Seconds()
	apiIdleRate, selfIdleRate := (api1-api0)/idle, (self1-self0).Seconds()/idle

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var wall []float64
	for n := range *scrapeBurst {
		if *scrapePaced && n > 0 {
			select {
			case <-ctx.Done():
				return scrapeResult{}, ctx.Err()
			case <-tick.C:
			}
		}
		t0 := time.Now()
		if err := w.read(ctx); err != nil {
			return scrapeResult{}, err
		}
		wall = append(wall, float64(time.Since(t0))/float64(time.Millisecond))
	}
	api2, err := cpuSeconds(pid)
	if err != nil {
		return scrapeResult{}, err
	}
	self2, elapsed := selfCPU(), time.Since(start).Seconds()
	n := float64(*scrapeBurst)
	return scrapeResult{
		apiserverMs: max(0, api2-api1-apiIdleRate*elapsed) / n * 1000,
		guardMs:     max(0, (self2-self1).Seconds()-selfIdleRate*elapsed) / n * 1000,
		wallMs:      wall,
	}, nil
}

// profileScrapes writes kube-apiserver's CPU profile, over 20 s of w's
// scrapes back to back, to *scrapeProfile.
func profileScrapes(ctx context.Context, rc rest.Interface, w scrapeWay) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for ctx.Err() == nil {
			_ = w.read(ctx)
		}
	})
	data, err := rc.Get().AbsPath("/debug/pprof/profile").Param("seconds", "20").Timeout(time.Minute).DoRaw(ctx)
	cancel()
	if err != nil {
		return err
	}
	return os.WriteFile(*scrapeProfile, data, 0o644)
}

// scrapeSizeSet is how big /metrics is, asked for in each way.
type scrapeSizeSet struct {
	text, gzip, proto, named float64
	lines, webhooks          int
}

func scrapeSizes(ctx context.Context, raw func(context.Context, string, string, []string) (io.ReadCloser, error), names []string) (scrapeSizeSet, error) {
	read := func(accept, encoding string, names []string) ([]byte, error) {
		body, err := raw(ctx, accept, encoding, names)
		if err != nil {
			return nil, err
		}
		defer body.Close()
		return io.ReadAll(body)
	}
	var s scrapeSizeSet
	text, err := read(textAccept, "identity", nil)
	if err != nil {
		return s, err
	}
	s.text, s.lines = float64(len(text)), strings.Count(string(text), "\n")
	s.webhooks = len(webhookNames(string(text)))
	if os.Getenv("WEBHOOK_GUARD_CAPTURE_METRICS") != "" {
		// Kept for apimetrics' benchmarks (gzip it into testdata).
		_ = os.WriteFile(os.Getenv("WEBHOOK_GUARD_CAPTURE_METRICS"), text, 0o644)
	}
	for _, r := range []struct {
		v                *float64
		accept, encoding string
		names            []string
	}{{&s.gzip, textAccept, "gzip", nil}, {&s.proto, protoAccept, "identity", nil}, {&s.named, textAccept, "identity", names}} {
		data, err := read(r.accept, r.encoding, r.names)
		if err != nil {
			return s, err
		}
		*r.v = float64(len(data))
	}
	return s, nil
}

// apiserverPid finds env's kube-apiserver: the process whose --cert-dir
// lies in env.Dir.
func apiserverPid(env *harness.Env) (int, error) {
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(data), "\x00")
		if filepath.Base(args[0]) != "kube-apiserver" || !slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, env.Dir) }) {
			continue
		}
		return strconv.Atoi(filepath.Base(filepath.Dir(p)))
	}
	return 0, fmt.Errorf("no kube-apiserver process with an argument in %s", env.Dir)
}

// populated is what populateControlPlane made.
type populated struct {
	// want are the webhooks the scrapes ask for.
	want    map[apimetrics.Webhook]bool
	cleanup func()
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// populateControlPlane installs *scrapeCRDs CRDs and uses each of their
// resources (create, get, update, delete, list, watch), so that the
// apiserver, its storage and its watch cache have per-resource series as
// on a real cluster; then it has the apiserver call *scrapeWebhooks
// webhooks once each.
func populateControlPlane(ctx context.Context, env *harness.Env) (*populated, error) {
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		return nil, err
	}
	for _, ns := range []string{scrapeNamespace, scrapeHookNamespace} {
		if err := env.EnsureNamespace(ctx, ns); err != nil {
			return nil, err
		}
	}
	p := &populated{cleanup: func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = dyn.Resource(crdGVR).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "bench.webhook-guard.io/section=scrape"})
	}}
	start := time.Now()
	say("scrape: installing and using %d CRDs", *scrapeCRDs)
	jobs := make(chan int)
	errs := make(chan error, *scrapeCRDs)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range jobs {
				if err := useCRD(ctx, dyn, i); err != nil {
					errs <- fmt.Errorf("CRD %d: %w", i, err)
				}
			}
		})
	}
	for i := range *scrapeCRDs {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	if err := errors.Join(slices.Collect(chanValues(errs))...); err != nil {
		p.cleanup()
		return nil, err
	}
	say("scrape: %d CRDs installed and used in %s", *scrapeCRDs, time.Since(start).Round(time.Second))

	start = time.Now()
	names, err := callWebhooks(ctx, env)
	if err != nil {
		p.cleanup()
		return nil, fmt.Errorf("calling %d webhooks: %w", *scrapeWebhooks, err)
	}
	say("scrape: the apiserver called %d webhooks in %s", len(names), time.Since(start).Round(time.Second))
	p.want = map[apimetrics.Webhook]bool{}
	for i := 0; i < len(names) && len(p.want) < scrapeTargets; i += max(1, len(names)/scrapeTargets) {
		p.want[apimetrics.Webhook{Name: names[i], Type: apimetrics.Mutating}] = true
	}
	return p, nil
}

func chanValues[T any](c <-chan T) func(func(T) bool) {
	return func(yield func(T) bool) {
		for v := range c {
			if !yield(v) {
				return
			}
		}
	}
}

// useCRD installs CRD i, waits until it is served, and uses it.
func useCRD(ctx context.Context, dyn dynamic.Interface, i int) error {
	group := fmt.Sprintf("g%03d.%s", i, scrapeGroupSuffix)
	kind := fmt.Sprintf("Widget%03d", i)
	plural := strings.ToLower(kind) + "s"
	crd := scrapeCRD(group, kind, plural)
	if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return err
	}
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: plural}
	res := dyn.Resource(gvr).Namespace(scrapeNamespace)
	obj := func(n int) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": group + "/v1", "kind": kind,
			"metadata": map[string]any{"name": fmt.Sprintf("w%d", n)},
			"spec":     map[string]any{"size": int64(n), "color": "blue"},
		}}
	}
	// The first create waits until the CRD is served.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := res.Create(ctx, obj(0), metav1.CreateOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("creating the first %s: %w", kind, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	for n := 1; n < scrapeObjects; n++ {
		if _, err := res.Create(ctx, obj(n), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	got, err := res.Get(ctx, "w0", metav1.GetOptions{})
	if err != nil {
		return err
	}
	got.SetLabels(map[string]string{"touched": "yes"})
	if _, err := res.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		return err
	}
	if err := res.Delete(ctx, fmt.Sprintf("w%d", scrapeObjects-1), metav1.DeleteOptions{}); err != nil {
		return err
	}
	if _, err := res.List(ctx, metav1.ListOptions{}); err != nil {
		return err
	}
	if _, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{}); err != nil {
		return err
	}
	w, err := res.Watch(ctx, metav1.ListOptions{TimeoutSeconds: ptr.To[int64](1)})
	if err != nil {
		return err
	}
	for range w.ResultChan() { // until the apiserver ends it
	}
	return nil
}

// scrapeCRD is a namespaced CustomResourceDefinition of kind in group,
// served and stored as v1, with a small schema (spec.size, spec.color).
func scrapeCRD(group, kind, plural string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata": map[string]any{
			"name":   plural + "." + group,
			"labels": map[string]any{"bench.webhook-guard.io/section": "scrape"},
		},
		"spec": map[string]any{
			"group": group,
			"scope": "Namespaced",
			"names": map[string]any{"plural": plural, "singular": strings.ToLower(kind), "kind": kind, "listKind": kind + "List"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"spec": map[string]any{"type": "object", "properties": map[string]any{
							"size":  map[string]any{"type": "integer"},
							"color": map[string]any{"type": "string"},
						}},
					},
				}},
			}},
		},
	}}
}

// callWebhooks has the apiserver call *scrapeWebhooks mutating webhooks,
// each once, then deletes their configurations; the apiserver's counters
// stay. It returns the webhooks' names.
func callWebhooks(ctx context.Context, env *harness.Env) ([]string, error) {
	if *scrapeWebhooks == 0 {
		return nil, errors.New("the section needs webhooks to ask for (-scrape-webhooks)")
	}
	wh, err := harness.StartWebhook(harness.WebhookOptions{Host: "127.0.0.1"})
	if err != nil {
		return nil, err
	}
	defer wh.Close()
	wh.SetBehaviour(scrapeHookPath, harness.Allow())
	url := wh.URL(scrapeHookPath)
	none, ignore := admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Ignore
	var names []string
	var mwcs []string
	defer func() {
		for _, name := range mwcs {
			_ = env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	}()
	for c := 0; len(names) < *scrapeWebhooks; c++ {
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("scrape-bench-%02d", c)}}
		for range min(scrapeHooksPerMWC, *scrapeWebhooks-len(names)) {
			name := fmt.Sprintf("hook-%04d.%s", len(names), scrapeGroupSuffix)
			names = append(names, name)
			mwc.Webhooks = append(mwc.Webhooks, admissionregistrationv1.MutatingWebhook{
				Name:         name,
				ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: wh.CA.CertPEM},
				Rules: []admissionregistrationv1.RuleWithOperations{{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				}},
				NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: scrapeHookNamespace}},
				FailurePolicy:           &ignore,
				SideEffects:             &none,
				TimeoutSeconds:          ptr.To[int32](5),
				AdmissionReviewVersions: []string{"v1"},
			})
		}
		if _, err := env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		mwcs = append(mwcs, mwc.Name)
	}
	// The apiserver sees new configurations within a moment; create until
	// its metrics count a call of every webhook.
	rc := env.Clientset.Discovery().RESTClient()
	deadline := time.Now().Add(2 * time.Minute)
	for n := 0; ; n++ {
		time.Sleep(time.Second)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("called-%d", n)}}
		if _, err := env.Clientset.CoreV1().ConfigMaps(scrapeHookNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		called, err := calledWebhooks(ctx, rc)
		if err != nil {
			return nil, err
		}
		missing := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return called[n] })
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("%d of %d webhooks never called (%d calls made)", len(missing), len(names), wh.Calls(scrapeHookPath))
		}
	}
	return names, nil
}

// calledWebhooks returns the names of the webhooks the apiserver has
// counted calls of, from its /metrics.
func calledWebhooks(ctx context.Context, rc rest.Interface) (map[string]bool, error) {
	body, err := rc.Get().AbsPath("/metrics").SetHeader("Accept", textAccept).Param("name[]", apimetrics.RequestTotal).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	return webhookNames(string(body)), nil
}

// webhookNames are the names in text's apimetrics.RequestTotal series.
func webhookNames(text string) map[string]bool {
	hooks := map[string]bool{}
	for line := range strings.Lines(text) {
		if rest, ok := strings.CutPrefix(line, apimetrics.RequestTotal+"{"); ok {
			if _, after, ok := strings.Cut(rest, `name="`); ok {
				hooks[after[:strings.IndexByte(after, '"')]] = true
			}
		}
	}
	return hooks
}
