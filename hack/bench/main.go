// Command bench measures webhook-guard against a real control plane and
// prints one table, with the goals of docs/performance.md
// beside the measured values, and writes it as JSON. Run it with
// "make bench". Every case runs -runs times (default 3); the table gives
// the median and the range.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// Row is one line of the table: a value measured once per run, and the
// goal it is held against.
type Row struct {
	Section string `json:"section"`
	Case    string `json:"case"`
	Metric  string `json:"metric"`
	// Runs holds one value per run.
	Runs []float64 `json:"runs"`
	// Unit is printed after the value ("ms", "cores", "MiB", "×", "%").
	Unit string `json:"unit,omitempty"`
	// Goal is the goal in docs/performance.md, as text ("≤ 0.1"); "" when there is none.
	Goal string `json:"goal,omitempty"`
	// Met says whether every run met the goal; nil when there is none.
	Met *bool `json:"met,omitempty"`
	// Note says how it was measured, when the case name does not.
	Note string `json:"note,omitempty"`
}

// AtMost and AtLeast set r's goal and whether every run met it.
func (r Row) AtMost(limit float64) Row {
	r.Goal = "≤ " + format(limit)
	met := slices.Max(r.Runs) <= limit
	r.Met = &met
	return r
}

func (r Row) AtLeast(limit float64) Row {
	r.Goal = "≥ " + format(limit)
	met := slices.Min(r.Runs) >= limit
	r.Met = &met
	return r
}

// Bench is what sections share: one control plane, started on first use,
// and the number of runs per case.
type Bench struct {
	Runs int
	env  *harness.Env
}

// markingFlags adds to flags (a new map when nil) what -marking=false
// needs: as in test/e2e/partition, an apiserver without
// MutatingAdmissionPolicy, where the guard runs without marking. Every
// control plane the bench starts takes its flags from here.
func markingFlags(flags map[string]string) map[string]string {
	if *withMarking {
		return flags
	}
	return harness.WithoutMutatingAdmissionPolicy(flags)
}

// Env returns the shared control plane.
func (b *Bench) Env() (*harness.Env, error) {
	if b.env != nil {
		return b.env, nil
	}
	say("starting kube-apiserver and etcd")
	env, err := harness.Start(harness.Options{APIServerFlags: markingFlags(nil)})
	if err != nil {
		return nil, err
	}
	b.env = env
	if u, err := url.Parse(env.Config.Host); err == nil {
		apiserverHost = u.Host
	}
	return env, nil
}

// LimitedEnv returns the shared control plane and the Deployment's CPU
// limit, for the sections that run the guard inside it.
func (b *Bench) LimitedEnv() (*harness.Env, float64, error) {
	limit, err := deploymentCPULimit()
	if err != nil {
		return nil, 0, err
	}
	env, err := b.Env()
	return env, limit, err
}

// section measures one part of the table.
type section struct {
	name string
	run  func(ctx context.Context, b *Bench) ([]Row, error)
}

var sections []section

func register(name string, run func(ctx context.Context, b *Bench) ([]Row, error)) {
	sections = append(sections, section{name, run})
}

func main() {
	runs := flag.Int("runs", 3, "Runs per case; the table gives the median and the range.")
	only := flag.String("only", "", "Comma-separated sections to run (default all): "+names())
	jsonOut := flag.String("json", "", "Also write the table as JSON to this file.")
	flag.Parse()
	logf.SetLogger(logr.Discard())
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	b := &Bench{Runs: *runs}
	rows, err := runSections(ctx, b, *only)
	if b.env != nil {
		b.env.Stop()
	}
	print(rows)
	if *jsonOut != "" {
		data, jerr := json.MarshalIndent(map[string]any{"machine": machine(), "rows": rows}, "", "  ")
		if jerr == nil {
			jerr = os.WriteFile(*jsonOut, append(data, '\n'), 0o644)
		}
		if err == nil {
			err = jerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func names() string {
	var n []string
	for _, s := range sections {
		n = append(n, s.name)
	}
	return strings.Join(n, ",")
}

// order is the table's order of sections, as docs/performance.md
// lists them.
var order = []string{"latency", "cycles", "massfailure", "scale", "traffic", "scrape", "starvation", "probecpu", "road", "policy"}

func runSections(ctx context.Context, b *Bench, only string) ([]Row, error) {
	slices.SortStableFunc(sections, func(a, b section) int {
		return cmpIndex(a.name) - cmpIndex(b.name)
	})
	var rows []Row
	var errs []error
	for _, s := range sections {
		if only != "" && !slices.Contains(strings.Split(only, ","), s.name) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		say("section %s", s.name)
		start := time.Now()
		r, err := s.run(ctx, b)
		rows = append(rows, r...)
		if err != nil {
			// The other sections still run; the bench fails at the end.
			say("section %s failed: %v", s.name, err)
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
		}
		say("section %s took %s", s.name, time.Since(start).Round(time.Second))
	}
	return rows, errors.Join(errs...)
}

func cmpIndex(name string) int {
	if i := slices.Index(order, name); i >= 0 {
		return i
	}
	return len(order)
}

func machine() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s, %d CPUs, %s/%s, %s, %s", host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), time.Now().UTC().Format(time.RFC3339))
}

func print(rows []Row) {
	fmt.Printf("\nwebhook-guard bench on %s\nEach value: median of the runs, then [min–max] over them.\n\n", machine())
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "section\tcase\tmetric\tmeasured\tgoal\tmet")
	for _, r := range rows {
		met := ""
		if r.Met != nil {
			met = map[bool]string{true: "yes", false: "NO"}[*r.Met]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Section, r.Case, r.Metric, r.measured(), r.Goal, met)
	}
	tw.Flush()
	for _, r := range rows {
		if r.Note != "" {
			fmt.Printf("  %s / %s: %s\n", r.Section, r.Case, r.Note)
		}
	}
}

func (r Row) measured() string {
	if len(r.Runs) == 0 {
		return "-"
	}
	s := slices.Sorted(slices.Values(r.Runs))
	med := median(s)
	if len(s) == 1 {
		return format(med) + r.Unit
	}
	return fmt.Sprintf("%s%s [%s–%s]", format(med), r.Unit, format(s[0]), format(s[len(s)-1]))
}

// median of v; 0 when empty.
func median[T ~int64 | ~float64](v []T) T {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// format prints v with three significant digits.
func format(v float64) string {
	switch a := max(v, -v); {
	case a == 0:
		return "0"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}
