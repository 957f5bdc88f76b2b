// Command dashboard renders the guard's Grafana dashboard to a PNG from a
// short recorded scenario, for the documentation. Grafana is not packaged
// for this machine, so it does what Grafana and Prometheus would do:
//
//  1. it starts a local control plane (test/e2e/harness), a webhook behind
//     a Service, and the real guard binary probing it every 200ms;
//  2. it scrapes the guard's /metrics every second (and kube-apiserver's,
//     when a panel reads apiserver_* series) into memory, adding the
//     namespace and pod labels a ServiceMonitor would, with staleness
//     markers as Prometheus writes them;
//  3. it drives ConfigMap creates, makes the webhook slow (an outage),
//     waits for the circuit to open, lets the webhook recover and waits for
//     the circuit to close;
//  4. it evaluates every panel's PromQL targets, read from the dashboard
//     JSON, with Prometheus's own engine over the scenario's range; and
//  5. it draws the panels as the dashboard lays them out (gridPos), with
//     their titles, units, value mappings and legends, into one PNG.
//
// Run it with "make dashboard-image".
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// dashboardPath is the dashboard, relative to the repository root.
const dashboardPath = "deploy/kustomize/components/prometheus/webhook-guard-dashboard.json"

var (
	out       = flag.String("out", "docs/img/dashboard.png", "PNG file to write.")
	dashboard = flag.String("dashboard", "", "Grafana dashboard JSON (default: the one in "+dashboardPath+").")
	width     = flag.Int("width", 1600, "Image width in pixels.")
	height    = flag.Int("height", 1200, "Image height in pixels.")
	healthy   = flag.Duration("healthy", 10*time.Second, "How long the webhook is healthy before the outage, and after the circuit closes.")
	outage    = flag.Duration("outage", 15*time.Second, "How long the webhook stays slow.")
)

func main() {
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	began := time.Now()
	path := *dashboard
	if path == "" {
		root, err := harness.RepoRoot()
		if err != nil {
			return err
		}
		path = filepath.Join(root, dashboardPath)
	}
	d, err := loadDashboard(path)
	if err != nil {
		return err
	}
	store := newStore()
	rec, err := record(ctx, store, d.needsAPIServer())
	if err != nil {
		return err
	}
	panels, err := d.evaluate(ctx, store, rec)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	if err := render(*out, *width, *height, d, panels, rec); err != nil {
		return err
	}
	say("wrote %s (%dx%d) in %s", *out, *width, *height, time.Since(began).Round(time.Second))
	return nil
}

func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "dashboard: "+format+"\n", args...)
}
