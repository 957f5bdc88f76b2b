package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/webhook-guard/webhook-guard/internal/breaker"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// readHeaderTimeout bounds how long the plain /status server waits for a
// request's headers, so that a client that never sends them holds no
// connection for ever.
const readHeaderTimeout = 5 * time.Second

// Server serves the leader's in-memory probe counts as JSON, one Row per
// target. It holds no secrets and changes nothing. As an http.Handler it
// is GET /status on the metrics server, behind its authentication and
// authorization (WithCredentials); as a Runnable it serves the same,
// unauthenticated, on Addr, which only a loopback address may be, for a
// guard run by hand.
type Server struct {
	// Addr is where Start listens ("guard run --status-bind-address").
	Addr string
	// Config lists the targets, one Row each, in its order.
	Config *config.Configuration
	// State holds the probe counts, filled by the breaker.
	State *breaker.State
	// Marking is why marking is unavailable, if it is; it is shown on the
	// mutating targets.
	Marking string
}

var (
	_ manager.Runnable               = (*Server)(nil)
	_ manager.LeaderElectionRunnable = (*Server)(nil)
	_ http.Handler                   = (*Server)(nil)
)

// NeedLeaderElection is false: every replica answers, and a replica that
// does not lead says so in each row.
func (s *Server) NeedLeaderElection() bool { return false }

// ServeHTTP answers GET with one row per target, and any other method
// with 405.
func (s *Server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	rows := make([]Row, 0, len(s.Config.Targets))
	for _, t := range s.Config.Targets {
		row := probeRow(t, s.State)
		if t.Kind == circuit.KindMutating {
			row.Marking = s.Marking
		}
		rows = append(rows, row)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rows)
}

// Start serves GET /status on s.Addr without authentication; "guard run"
// admits only a loopback address for it.
func (s *Server) Start(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, s)
	srv := &http.Server{Addr: s.Addr, Handler: mux, ReadHeaderTimeout: readHeaderTimeout}
	l, err := net.Listen("tcp", s.Addr)
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

// SlowVetoedNote ends a row's last result while kube-apiserver's own calls
// veto an opening on the probe's slow failures (decide.SlowVetoed).
const SlowVetoedNote = "only slow, and kube-apiserver's own calls to the webhook succeed since the first: nothing opens on these probes"

// probeRow is t's row from the breaker's state.
func probeRow(t config.Target, state *breaker.State) Row {
	row := Row{Kind: string(t.Kind), Configuration: t.Configuration, Webhook: t.Webhook}
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
	reopenings := st.Reopenings
	if t.Observes() {
		reopenings = st.WouldReopenings
	}
	if d := decide.Damp(t, reopenings); d > 0 {
		row.Reopenings, row.DampedFor = reopenings, d.String()
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
	if t.Observes() {
		row.WouldOpenSignal = st.WouldOpenSignal
		if st.WouldBeOpen() {
			row.WouldOpenSince = st.WouldOpenSince.UTC().Format(time.RFC3339)
		}
		if !st.WouldClosedAt.IsZero() {
			row.WouldClosedAt = st.WouldClosedAt.UTC().Format(time.RFC3339)
		}
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
		if t.APIServerSignal.Enabled && decide.SlowVetoed(st.Counts, st.APIServer) {
			row.LastResult += "; " + SlowVetoedNote
		}
	default:
		row.LastResult = fmt.Sprintf("%s (%s)", st.Last.Outcome, st.Last.Duration.Round(time.Millisecond))
	}
	return row
}
