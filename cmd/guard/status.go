package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/breaker"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// targetStatus is one row of /status and of "guard status".
type targetStatus struct {
	Kind          string `json:"kind"`
	Configuration string `json:"configuration"`
	Webhook       string `json:"webhook"`
	State         string `json:"state,omitempty"`
	Mode          string `json:"mode,omitempty"`
	Since         string `json:"since,omitempty"`
	LastResult    string `json:"lastResult,omitempty"`
	LastProbe     string `json:"lastProbe,omitempty"`
	Failures      int    `json:"consecutiveFailures"`
	Successes     int    `json:"consecutiveSuccesses"`
	Problem       string `json:"problem,omitempty"`
	// OpenedBy is the signal that opened the circuit, from the record.
	OpenedBy string `json:"openedBy,omitempty"`
	// Owner is the breaker identity that signed the open circuit's entry
	// (circuit.Entry.By): only that installation closes it. Empty for an
	// entry written before entries were signed.
	Owner string `json:"owner,omitempty"`
	// Original is, for a circuit handed to its administrators, what the
	// breaker's entry said before the handoff removed it: the original
	// failurePolicy, the mode and when it opened (breaker.HandOffOriginal).
	Original string `json:"original,omitempty"`
	// The apiserver signal: its last observation, its consecutive failing
	// observations, the requests admitted without the webhook while open,
	// and which signal fails while the other is healthy.
	APIServerLast     string  `json:"apiserverLastResult,omitempty"`
	APIServerFailures int     `json:"apiserverConsecutiveFailures"`
	Admitted          float64 `json:"admittedWithoutWebhook"`
	Marked            float64 `json:"markedObjects"`
	Disagree          string  `json:"signalsDisagree,omitempty"`
	// The path probe (kube-apiserver's road, through its service proxy):
	// its last result and its consecutive results, while it runs.
	PathLast      string `json:"pathProbeLastResult,omitempty"`
	PathFailures  int    `json:"pathProbeConsecutiveFailures,omitempty"`
	PathSuccesses int    `json:"pathProbeConsecutiveSuccesses,omitempty"`
	// Marking says why objects admitted while the circuit is open are not
	// marked, when they are not.
	Marking string `json:"marking,omitempty"`
}

// statusServer serves the leader's in-memory probe counts as JSON. It
// holds no secrets and changes nothing. As an http.Handler it is GET
// /status on the metrics server, behind its authentication and
// authorization (status_auth.go); as a Runnable it serves the same,
// unauthenticated, on --status-bind-address, which only a loopback
// address may be, for a guard run by hand.
type statusServer struct {
	addr  string
	cfg   *config.Configuration
	state *breaker.State
	// marking is why marking is unavailable, if it is.
	marking string
}

var (
	_ manager.Runnable               = (*statusServer)(nil)
	_ manager.LeaderElectionRunnable = (*statusServer)(nil)
	_ http.Handler                   = (*statusServer)(nil)
)

func (s *statusServer) NeedLeaderElection() bool { return false }

// ServeHTTP answers GET with one row per target, and any other method
// with 405.
func (s *statusServer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	rows := make([]targetStatus, 0, len(s.cfg.Targets))
	for _, t := range s.cfg.Targets {
		row := probeRow(t, s.state)
		if t.Kind == circuit.KindMutating {
			row.Marking = s.marking
		}
		rows = append(rows, row)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rows)
}

// Start serves GET /status on s.addr without authentication; the flag
// (loopbackAddr) admits only a loopback address.
func (s *statusServer) Start(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.Handle("GET "+statusPath, s)
	srv := &http.Server{Addr: s.addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("status endpoint: %w", err)
	}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func probeRow(t config.Target, state *breaker.State) targetStatus {
	row := targetStatus{Kind: string(t.Kind), Configuration: t.Configuration, Webhook: t.Webhook}
	st, ok := state.Get(t.Key())
	if !ok {
		row.Problem = "not probed yet by this replica (only the leader probes)"
		return row
	}
	row.Failures, row.Successes, row.Problem = st.Failures, st.Successes, st.Problem
	row.APIServerFailures, row.Admitted, row.Marked = st.APIServer.Failures, st.Admitted, st.Marked
	row.PathFailures, row.PathSuccesses = st.Path.Failures, st.Path.Successes
	switch {
	case st.Path.LastUnknown != nil:
		row.PathLast = "Unknown: " + st.Path.LastUnknown.Err.Error()
	case st.Path.Last.Err != nil:
		row.PathLast = fmt.Sprintf("%s (%s): %v", st.Path.Last.Outcome, st.Path.Last.Reason, st.Path.Last.Err)
	case st.Path.Last.Outcome != "":
		row.PathLast = string(st.Path.Last.Outcome)
	}
	if st.DisagreeFor >= breaker.DisagreeAfter {
		row.Disagree = st.Disagree + " failing, the other healthy"
	}
	switch {
	case !t.APIServerSignal.Enabled:
		row.APIServerLast = "disabled"
	case st.APIServer.LastUnknown != nil:
		row.APIServerLast = st.APIServer.LastUnknown.Err.Error()
	case st.APIServer.Last.Outcome == probe.OutcomeFailed:
		row.APIServerLast = st.APIServer.Last.Err.Error()
	case st.APIServer.Last.Outcome != "":
		row.APIServerLast = string(st.APIServer.Last.Outcome)
	}
	if !st.LastProbe.IsZero() {
		row.LastProbe = st.LastProbe.UTC().Format(time.RFC3339)
	}
	switch {
	case st.LastUnknown != nil && st.UnknownWhileOpen(t.CloseAfter):
		row.LastResult = fmt.Sprintf("Unknown for %d probes in a row (%v); if the circuit is open, it closes only when the apiserver's calls to the webhook succeed for %d intervals (Ignore mode), and stays open otherwise",
			st.Unknowns, st.LastUnknown.Err, t.CloseAfter)
	case st.LastUnknown != nil:
		row.LastResult = fmt.Sprintf("Unknown: %v", st.LastUnknown.Err)
	case st.Last.Outcome == "":
	case st.Last.Err != nil:
		row.LastResult = fmt.Sprintf("%s (%s, %s): %v", st.Last.Outcome, st.Last.Reason, st.Last.Duration.Round(time.Millisecond), st.Last.Err)
	default:
		row.LastResult = fmt.Sprintf("%s (%s)", st.Last.Outcome, st.Last.Duration.Round(time.Millisecond))
	}
	return row
}

// statusReport is what "guard status" found; -o json|yaml prints it.
type statusReport struct {
	// Namespace is the installation's namespace.
	Namespace string `json:"namespace"`
	// ConfigSource says where the GuardConfiguration came from.
	ConfigSource string `json:"configSource"`
	// Instance is the configuration's instance name, if any.
	Instance string `json:"instance,omitempty"`
	// Lease is the leader-election Lease read, and Leader its holder pod.
	Lease  string `json:"lease,omitempty"`
	Leader string `json:"leader,omitempty"`
	// Targets are the configured targets: state from the objects, counts
	// from the leader.
	Targets []targetStatus `json:"targets"`
	// OrphanedRecords are open circuits of webhooks that are no longer
	// targets.
	OrphanedRecords []orphanRow `json:"orphanedRecords,omitempty"`
	// Unavailable names what could not be read, and why.
	Unavailable []string `json:"unavailable,omitempty"`
}

type orphanRow struct {
	Kind          string `json:"kind"`
	Configuration string `json:"configuration"`
	Webhook       string `json:"webhook"`
	By            string `json:"by,omitempty"`
}

// statusCommand prints every target: its circuit state from the objects,
// and the leader's probe counts. With a kubeconfig alone it reads the
// installed configuration from the cluster (the ConfigMap the guard's
// Deployment mounts), finds the leader from its Lease, and reads the
// leader's /status through the apiserver's pods proxy: no port-forward.
// What it cannot read it names, and prints the rest.
func statusCommand(ctx context.Context, args []string, stdout, stderr io.Writer, restConfig func() (*rest.Config, error)) error {
	fs := flagSet("status", stderr)
	path := fs.String("config", "", "GuardConfiguration file; default: the one installed in the cluster (the ConfigMap --deployment mounts).")
	namespace := fs.String("namespace", circuit.DefaultNamespace, "Namespace of the installation.")
	deployment := fs.String("deployment", "webhook-guard", "The guard's Deployment, whose volume \"config\" names the installed ConfigMap.")
	endpoint := fs.String("endpoint", "", "A /status URL to read counts from instead of the leader's pod: https://... (for example a port-forward to the metrics port; a status token is requested and sent, the self-signed certificate is not verified) or http://127.0.0.1:... (--status-bind-address of a guard run by hand); default: the leader's pod through the apiserver.")
	output := fs.String("o", "table", "Output format: table, json or yaml.")
	addKubeconfigFlag(fs)
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *output != "table" && *output != "json" && *output != "yaml" {
		return usageError{fmt.Errorf("status: -o %q: must be table, json or yaml", *output)}
	}
	rep := statusReport{Namespace: *namespace}
	cfg, source, rc, c, err := fileConfigAndClient(*path, restConfig)
	if err != nil {
		return err
	}
	rep.ConfigSource = source
	if cfg == nil {
		if cfg, rep.ConfigSource, err = installedConfig(ctx, c, *namespace, *deployment); err != nil {
			return fmt.Errorf("status: %w; pass --config FILE to read the configuration from a file", err)
		}
	}
	rep.Instance = cfg.Instance

	counts := map[string]targetStatus{}
	var rows []targetStatus
	if *endpoint != "" {
		token := ""
		if strings.HasPrefix(*endpoint, "https://") {
			cs, cerr := kubernetes.NewForConfig(rc)
			if cerr != nil {
				return cerr
			}
			token, err = statusToken(ctx, cs, *namespace)
		}
		if err == nil {
			rows, err = fetchStatus(ctx, *endpoint, token)
		}
		if err != nil {
			rep.Unavailable = append(rep.Unavailable, fmt.Sprintf("probe counts from %s: %v", *endpoint, err))
		}
	} else {
		rep.Lease = *namespace + "/" + leaderElectionID(cfg.Instance)
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return err
		}
		pod, err := leaderPod(ctx, c, *namespace, leaderElectionID(cfg.Instance))
		if err != nil {
			rep.Unavailable = append(rep.Unavailable, fmt.Sprintf("probe counts: %v", err))
		} else {
			rep.Leader = pod.Name
			if rows, err = proxyStatus(ctx, cs, pod); err != nil {
				rep.Unavailable = append(rep.Unavailable, fmt.Sprintf("probe counts from the leader pod %s/%s through the apiserver: %v", pod.Namespace, pod.Name, err))
			}
		}
	}
	for _, r := range rows {
		counts[r.Kind+"/"+r.Configuration+"/"+r.Webhook] = r
	}
	for _, t := range cfg.Targets {
		row := objectRow(ctx, c, t)
		if cr, ok := counts[t.Key()]; ok {
			row.Failures, row.Successes, row.LastResult, row.LastProbe = cr.Failures, cr.Successes, cr.LastResult, cr.LastProbe
			row.APIServerLast, row.APIServerFailures, row.Admitted, row.Disagree = cr.APIServerLast, cr.APIServerFailures, cr.Admitted, cr.Disagree
			row.Marking, row.Marked = cr.Marking, cr.Marked
			if cr.Problem != "" && row.Problem == "" {
				row.Problem = cr.Problem
			}
		}
		rep.Targets = append(rep.Targets, row)
	}
	switch orphans, err := orphanedRecords(ctx, c, cfg, ""); {
	case err != nil:
		rep.Unavailable = append(rep.Unavailable, fmt.Sprintf("records of removed targets: %v", err))
	default:
		for _, o := range orphans {
			rep.OrphanedRecords = append(rep.OrphanedRecords, orphanRow{Kind: string(o.kind), Configuration: o.configuration, Webhook: o.webhook, By: o.by})
		}
	}

	switch *output {
	case "json":
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case "yaml":
		data, err := yaml.Marshal(rep)
		if err != nil {
			return err
		}
		_, err = stdout.Write(data)
		return err
	}
	return printStatus(stdout, stderr, rep)
}

// printStatus prints rep as a table, and what was unavailable on stderr.
func printStatus(stdout, stderr io.Writer, rep statusReport) error {
	fmt.Fprintf(stdout, "Configuration: %s\n", rep.ConfigSource)
	if rep.Lease != "" {
		fmt.Fprintf(stdout, "Leader: %s (Lease %s)\n", dash(rep.Leader), rep.Lease)
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tCONFIGURATION\tWEBHOOK\tSTATE\tMODE\tSINCE\tOPENED BY\tOWNER\tFAILURES\tSUCCESSES\tADMITTED WITHOUT\tLAST PROBE\tAPISERVER")
	for _, row := range rep.Targets {
		last := row.LastResult
		if row.Problem != "" {
			last = row.Problem
		}
		admitted := "-"
		if row.State == "Open" {
			admitted = fmt.Sprintf("%.0f", row.Admitted)
			if row.Marked > 0 {
				admitted += fmt.Sprintf(" (%.0f marked)", row.Marked)
			}
		}
		apiserver := row.APIServerLast
		if row.Disagree != "" {
			apiserver += " (signals disagree: " + row.Disagree + ")"
		}
		owner := row.Owner
		if row.State == "Open" && owner == "" {
			owner = "(unsigned)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", row.Kind, row.Configuration, row.Webhook, row.State, row.Mode, dash(row.Since), dash(row.OpenedBy),
			dash(owner), row.Failures, row.Successes, admitted, dash(last), dash(apiserver))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.OrphanedRecords) > 0 {
		fmt.Fprintln(stdout, "\nOpen circuits on webhooks that are no longer targets (the breaker closes them when it may update the configuration):")
		for _, o := range rep.OrphanedRecords {
			fmt.Fprintf(stdout, "  %s %s %s (opened by %s)\n", o.Kind, o.Configuration, o.Webhook, dash(o.By))
		}
	}
	for _, row := range rep.Targets {
		if row.Marking != "" {
			fmt.Fprintf(stdout, "\nMarking: %s\n", row.Marking)
			break
		}
	}
	for _, u := range rep.Unavailable {
		fmt.Fprintf(stderr, "unavailable: %s\n", u)
	}
	return nil
}

// objectRow reads a target's circuit state from its configuration.
func objectRow(ctx context.Context, c client.Reader, t config.Target) targetStatus {
	row := targetStatus{Kind: string(t.Kind), Configuration: t.Configuration, Webhook: t.Webhook, State: "Closed", Mode: string(t.Mode)}
	obj := t.Kind.New()
	if err := c.Get(ctx, client.ObjectKey{Name: t.Configuration}, obj); err != nil {
		row.State = "Unknown"
		if apierrors.IsNotFound(err) {
			row.State, row.Problem = "Missing", "configuration not found"
		} else {
			row.Problem = err.Error()
		}
		return row
	}
	annotations := obj.GetAnnotations()
	if annotations[circuit.OverrideAnnotation] != "" {
		row.State = "HandedOff"
		row.Problem = fmt.Sprintf("override: %s", annotations[circuit.OverrideAnnotation])
		// Until the breaker releases it, the entry still says what the
		// original was; after, only the HandedOff Event does.
		if rec, err := circuit.Decode(annotations); err == nil {
			if e, open := rec[t.Webhook]; open {
				row.Owner, row.Original = e.By, breaker.HandOffOriginal(e)
				row.Problem += "; not released by the breaker yet; " + row.Original
				return row
			}
		}
		original, err := handedOffOriginal(ctx, c, t, obj.GetUID())
		switch {
		case err != nil:
			row.Problem += fmt.Sprintf("; the original failurePolicy is in its HandedOff Event, which could not be read (%v): %s", err, handedOffEventsCommand(t))
		case original != "":
			row.Original = original
			row.Problem += "; " + original
		}
		return row
	}
	rec, err := circuit.Decode(annotations)
	if err != nil {
		row.State, row.Problem = "Unknown", err.Error()
		return row
	}
	if e, open := rec[t.Webhook]; open {
		row.State, row.Mode, row.OpenedBy, row.Owner = "Open", string(e.Mode), e.Signal, e.By
		row.Since = fmt.Sprintf("%s (%s)", e.OpenedAt.UTC().Format(time.RFC3339), time.Since(e.OpenedAt.Time).Round(time.Second))
	}
	return row
}

// handedOffOriginal finds the latest HandedOff Event about t's webhook on
// its configuration (in namespace default, where Events about
// cluster-scoped objects go) and returns what it says the original was
// (breaker.HandOffOriginal); "" when there is none (Events expire, an hour
// after the handoff by default).
func handedOffOriginal(ctx context.Context, c client.Reader, t config.Target, uid types.UID) (string, error) {
	events := &corev1.EventList{}
	if err := c.List(ctx, events, client.InNamespace(metav1.NamespaceDefault), client.MatchingFields{
		"involvedObject.kind": t.Kind.ObjectKind(), "involvedObject.name": t.Configuration, "reason": string(breaker.HandedOff),
	}); err != nil {
		return "", err
	}
	var latest time.Time
	original := ""
	for _, ev := range events.Items {
		if uid != "" && ev.InvolvedObject.UID != "" && ev.InvolvedObject.UID != uid {
			continue // about an earlier configuration of that name
		}
		_, rest, ok := strings.Cut(ev.Message, " released "+t.Webhook+" ("+breaker.OriginalPrefix)
		if !ok {
			continue
		}
		what, _, _ := strings.Cut(rest, ")")
		if at := eventTime(ev); original == "" || at.After(latest) {
			latest, original = at, breaker.OriginalPrefix+what
		}
	}
	if original == "" {
		return "", nil
	}
	return fmt.Sprintf("%s (HandedOff Event of %s)", original, latest.UTC().Format(time.RFC3339)), nil
}

// eventTime is when ev last happened, whichever API wrote it.
func eventTime(ev corev1.Event) time.Time {
	at := ev.CreationTimestamp.Time
	for _, t := range []time.Time{ev.EventTime.Time, ev.LastTimestamp.Time} {
		if t.After(at) {
			at = t
		}
	}
	if ev.Series != nil && ev.Series.LastObservedTime.After(at) {
		at = ev.Series.LastObservedTime.Time
	}
	return at
}

// handedOffEventsCommand is the kubectl command that lists t's HandedOff
// Events.
func handedOffEventsCommand(t config.Target) string {
	return fmt.Sprintf("kubectl get events -n %s --field-selector involvedObject.kind=%s,involvedObject.name=%s,reason=%s",
		metav1.NamespaceDefault, t.Kind.ObjectKind(), t.Configuration, breaker.HandedOff)
}

// fetchStatus reads a guard's /status at endpoint. With a token (an
// https endpoint: the metrics port, whose certificate is self-signed, as
// kube-apiserver's pods proxy also accepts it), it authenticates with it.
func fetchStatus(ctx context.Context, endpoint, token string) ([]targetStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return nil, err
	}
	client := http.DefaultClient
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}} //nolint:gosec // the guard's self-signed metrics certificate; the token is short-lived and read-only
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", endpoint, resp.Status)
	}
	var rows []targetStatus
	if err := json.NewDecoder(resp.Body).Decode(&rows); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", endpoint, err)
	}
	return rows, nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
