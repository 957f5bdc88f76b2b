package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	latencytable "github.com/webhook-guard/webhook-guard/hack/latency"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

func init() {
	register("latency", latency)
}

// samples is the number of creates per latency case (-samples).
var samples = flag.Int("samples", 50, "ConfigMap creates per case of the latency table.")

// latency runs the demo (its own control plane, the sample slow webhook
// behind a Service, the real guard in both modes) once per run and takes
// its request-latency table.
func latency(ctx context.Context, b *Bench) ([]Row, error) {
	root, err := harness.RepoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "webhook-guard-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "demo")
	// hack/demo is in the hack module (hack/go.mod), so it builds from there.
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./demo")
	build.Dir, build.Stdout, build.Stderr = filepath.Join(root, "hack"), os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("building the demo: %w", err)
	}
	type key struct{ c, m string }
	var order []key
	runs := map[key][]float64{}
	for i := range b.Runs {
		out := filepath.Join(dir, fmt.Sprintf("latency-%d.json", i))
		say("latency: run %d of %d (%d creates per case)", i+1, b.Runs, *samples)
		cmd := exec.CommandContext(ctx, bin, "-samples", strconv.Itoa(*samples), "-json", out)
		cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("the demo: %w", err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			return nil, err
		}
		var cases []latencytable.Case
		if err := json.Unmarshal(data, &cases); err != nil {
			return nil, err
		}
		for _, c := range cases {
			for _, m := range []struct {
				name string
				v    float64
			}{{"p50 (ms)", c.P50Ms}, {"p95 (ms)", c.P95Ms}, {"max (ms)", c.MaxMs}, {"p50 / healthy", c.RatioToHealth}} {
				k := key{c.Case, m.name}
				if _, ok := runs[k]; !ok {
					order = append(order, k)
				}
				runs[k] = append(runs[k], m.v)
			}
		}
	}
	var rows []Row
	for _, k := range order {
		r := Row{Section: "latency", Case: k.c, Metric: k.m, Runs: runs[k]}
		if k.m == "p50 / healthy" && k.c == "slow, circuit open in Bypass mode" {
			r = r.AtMost(1)
		}
		rows = append(rows, r)
	}
	return rows, nil
}
