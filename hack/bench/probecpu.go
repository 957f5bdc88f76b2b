package main

// The "probecpu" section: client CPU per probe, as the guard pays it,
// against a bare keep-alive POST and a fresh TCP+TLS connection per POST,
// in the same run. It needs no control plane.
//
// The webhook runs in a separate process (this binary, re-executed with
// probeCPUServeEnv set), so that this process's CPU, from getrusage, is
// the client's alone. The server reports its own CPU on request, so the
// table also gives the server's cost per request.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/webhook-guard/webhook-guard/certs"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

const (
	// probeCPUServeEnv, set to "1", makes this binary the section's
	// webhook server instead of the bench (see serveProbeCPU).
	probeCPUServeEnv = "BENCH_PROBECPU_SERVE"
	// probeCPUWorkers concurrent clients, each with its own target (its
	// own port on the server, so the prober's pool keeps one connection
	// per target, as the guard does for 50 webhooks).
	probeCPUWorkers = 50
	// probeCPUPerWorker requests per worker are measured in each mode.
	probeCPUPerWorker = 120
	// probeCPURedialEvery is how many probes one pooled connection serves
	// in the guard: probe.DefaultRedial at a 1 s probe interval.
	probeCPURedialEvery = int(probe.DefaultRedial / time.Second)
)

func init() {
	// This runs before main parses flags: the server child takes none.
	if os.Getenv(probeCPUServeEnv) == "1" {
		if err := serveProbeCPU(); err != nil {
			fmt.Fprintln(os.Stderr, "bench probecpu server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	register("probecpu", probeCPU)
}

// serveProbeCPU is the child: a TLS admission webhook (ECDSA P-256
// certificate from a fresh CA, HTTP/1.1, as the e2e harness serves) on
// probeCPUWorkers loopback ports. It prints the addresses and the CA,
// then answers each line on stdin with its own CPU time (µs) and the
// number of connections it accepted, until stdin closes.
func serveProbeCPU() error {
	ca, err := certs.NewCA("webhook-guard-bench-ca", 24*time.Hour)
	if err != nil {
		return err
	}
	pair, err := ca.Issue([]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, 24*time.Hour)
	if err != nil {
		return err
	}
	cert, err := pair.TLSCertificate()
	if err != nil {
		return err
	}
	var conns atomic.Int64
	srv := &http.Server{
		Handler:           http.HandlerFunc(allowReview),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		},
	}
	tlsConfig := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	addrs := make([]string, 0, probeCPUWorkers)
	for range probeCPUWorkers {
		l, err := tls.Listen("tcp", "127.0.0.1:0", tlsConfig)
		if err != nil {
			return err
		}
		addrs = append(addrs, l.Addr().String())
		go func() { _ = srv.Serve(l) }()
	}
	fmt.Printf("%s %s\n", strings.Join(addrs, ","), base64.StdEncoding.EncodeToString(ca.CertPEM))
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fmt.Printf("%d %d\n", selfCPU().Microseconds(), conns.Load())
	}
	_ = srv.Close()
	return nil
}

// allowReview answers an AdmissionReview with allowed: true, as the e2e
// harness's Allow behaviour does.
func allowReview(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	out := admissionv1.AdmissionReview{
		TypeMeta: review.TypeMeta,
		Response: &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true},
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&out)
}

// selfCPU is this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// probeCPUServer is the parent's handle on the child.
type probeCPUServer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	addrs []string
	caPEM []byte
}

func startProbeCPUServer() (*probeCPUServer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), probeCPUServeEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &probeCPUServer{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	line, err := s.out.ReadString('\n')
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("reading the server's address: %w", err)
	}
	addrs, ca, ok := strings.Cut(strings.TrimSpace(line), " ")
	if s.caPEM, err = base64.StdEncoding.DecodeString(ca); !ok || err != nil {
		s.stop()
		return nil, fmt.Errorf("the server printed %q", line)
	}
	s.addrs = strings.Split(addrs, ",")
	if len(s.addrs) != probeCPUWorkers {
		s.stop()
		return nil, fmt.Errorf("the server listens on %d addresses, want %d", len(s.addrs), probeCPUWorkers)
	}
	return s, nil
}

// usage returns the server's CPU time so far and the connections it
// accepted.
func (s *probeCPUServer) usage() (time.Duration, int64, error) {
	if _, err := io.WriteString(s.stdin, "usage\n"); err != nil {
		return 0, 0, err
	}
	line, err := s.out.ReadString('\n')
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(line)
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("the server answered %q", line)
	}
	us, err1 := strconv.ParseInt(f[0], 10, 64)
	conns, err2 := strconv.ParseInt(f[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, err
	}
	return time.Duration(us) * time.Microsecond, conns, nil
}

func (s *probeCPUServer) stop() {
	_ = s.stdin.Close()
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// probeCPUMode is one way of sending the same AdmissionReview.
type probeCPUMode struct {
	name string
	// start prepares one run's clients and returns do, which sends
	// request n (-1 for the warm-up) of worker i, and a cleanup.
	start func() (do func(ctx context.Context, i, n int) error, cleanup func())
}

// probeCPUResult is one mode's measurement in one run.
type probeCPUResult struct {
	client, server float64 // ms per request
	conns          int64   // connections the server accepted while measured
}

// The modes of probeCPUClients.modes, in order.
const (
	modeProber = iota
	modeRedial
	modeKeepAlive
	modeFresh
)

func probeCPU(ctx context.Context, b *Bench) ([]Row, error) {
	srv, err := startProbeCPUServer()
	if err != nil {
		return nil, fmt.Errorf("starting the webhook process: %w", err)
	}
	defer srv.stop()
	c, err := newProbeCPUClients(srv)
	if err != nil {
		return nil, err
	}
	modes := c.modes()
	results, err := measureProbeCPUModes(ctx, srv, modes, b.Runs)
	if err != nil {
		return nil, err
	}
	return probeCPURows(modes, results), nil
}

// probeCPUClients is what every mode sends: the prober's own request to
// each of the server's ports, and the webhooks that name them.
type probeCPUClients struct {
	srv    *probeCPUServer
	roots  *x509.CertPool
	mapper deploymentsOnly
	hooks  []admissionregistrationv1.MutatingWebhook
	// uri and body are the prober's request, captured.
	uri  string
	body []byte
}

func newProbeCPUClients(srv *probeCPUServer) (*probeCPUClients, error) {
	c := &probeCPUClients{srv: srv, roots: x509.NewCertPool(), hooks: make([]admissionregistrationv1.MutatingWebhook, probeCPUWorkers)}
	if !c.roots.AppendCertsFromPEM(srv.caPEM) {
		return nil, errors.New("the server's CA is not PEM")
	}
	for i, addr := range srv.addrs {
		c.hooks[i] = probeCPUWebhook(i, "https://"+addr+"/mutate", srv.caPEM)
	}
	var err error
	if c.uri, c.body, err = capturedProbe(c.mapper); err != nil {
		return nil, fmt.Errorf("capturing the prober's request: %w", err)
	}
	return c, nil
}

func (c *probeCPUClients) newProber(pool *probe.ConnectionPool) *probe.Prober {
	return &probe.Prober{Discovery: c.mapper, Username: "system:serviceaccount:webhook-guard:webhook-guard", Pool: pool}
}

// probeWorker probes worker i's webhook with p, which must find it healthy.
func (c *probeCPUClients) probeWorker(ctx context.Context, p *probe.Prober, i int) error {
	if res := p.Probe(ctx, c.hooks[i], probe.Spec{}); res.Outcome != probe.OutcomeHealthy {
		return fmt.Errorf("probe %s: %v", res.Outcome, res.Err)
	}
	return nil
}

// post sends the prober's request to worker i's port with a bare client.
func (c *probeCPUClients) post(ctx context.Context, client *http.Client, i int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+c.srv.addrs[i]+c.uri, bytes.NewReader(c.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, */*")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return err
}

// bare is a mode's start with one net/http client for every worker.
func (c *probeCPUClients) bare(disableKeepAlives bool) func() (func(context.Context, int, int) error, func()) {
	return func() (func(context.Context, int, int) error, func()) {
		tr := &http.Transport{
			Proxy:             nil,
			TLSClientConfig:   &tls.Config{RootCAs: c.roots, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: disableKeepAlives,
		}
		client := &http.Client{Transport: tr}
		return func(ctx context.Context, i, _ int) error { return c.post(ctx, client, i) }, tr.CloseIdleConnections
	}
}

// pooled is the prober mode's start: one ConnectionPool, as the guard has.
func (c *probeCPUClients) pooled() (func(context.Context, int, int) error, func()) {
	pool := &probe.ConnectionPool{}
	p := c.newProber(pool)
	return func(ctx context.Context, i, _ int) error { return c.probeWorker(ctx, p, i) }, pool.Close
}

// redialling is the re-dial mode's start: one pool per worker, so that a
// worker's re-dial closes its own connection only, as Redial does for one
// target.
func (c *probeCPUClients) redialling() (func(context.Context, int, int) error, func()) {
	pools := make([]*probe.ConnectionPool, probeCPUWorkers)
	probers := make([]*probe.Prober, probeCPUWorkers)
	for i := range pools {
		pools[i] = &probe.ConnectionPool{}
		probers[i] = c.newProber(pools[i])
	}
	return func(ctx context.Context, i, n int) error {
			// The warm-up (n = -1) dials: it is probe 0 of the
			// connection's probeCPURedialEvery.
			if (n+1)%probeCPURedialEvery == 0 && n >= 0 {
				pools[i].Close()
			}
			return c.probeWorker(ctx, probers[i], i)
		}, func() {
			for _, p := range pools {
				p.Close()
			}
		}
}

// modes are the ways compared, indexed by modeProber and the rest.
func (c *probeCPUClients) modes() []probeCPUMode {
	return []probeCPUMode{
		modeProber:    {"prober (ConnectionPool)", c.pooled},
		modeRedial:    {fmt.Sprintf("prober, re-dial every %d probes", probeCPURedialEvery), c.redialling},
		modeKeepAlive: {"bare keep-alive POST", c.bare(false)},
		modeFresh:     {"fresh TCP+TLS per POST", c.bare(true)},
	}
}

// measureProbeCPUModes measures every mode in each of runs runs;
// results[m] are mode m's, by run.
func measureProbeCPUModes(ctx context.Context, srv *probeCPUServer, modes []probeCPUMode, runs int) ([][]probeCPUResult, error) {
	results := make([][]probeCPUResult, len(modes))
	for run := range runs {
		// Interleave, and rotate the order, so that noise and warm caches
		// hit every mode alike.
		for k := range modes {
			m := (run + k) % len(modes)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			r, err := measureProbeCPU(ctx, srv, modes[m])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", modes[m].name, err)
			}
			say("probecpu run %d: %s: client %.3f ms, server %.3f ms per request, %d connections", run+1, modes[m].name, r.client, r.server, r.conns)
			results[m] = append(results[m], r)
		}
	}
	return results, nil
}

// probeCPUSection is the table section of the probecpu rows.
const probeCPUSection = "probe CPU"

// probeCPURows is the section's rows: client, then server, CPU per
// request of each mode, and the client's ratios to bare keep-alive.
func probeCPURows(modes []probeCPUMode, results [][]probeCPUResult) []Row {
	var rows []Row
	for m, mode := range modes {
		var client []float64
		var conns []string
		for _, r := range results[m] {
			client = append(client, r.client)
			conns = append(conns, strconv.FormatInt(r.conns, 10))
		}
		note := probeCPUNote(m, fmt.Sprintf("server accepted %s connections while measured (per run)", strings.Join(conns, ", ")))
		rows = append(rows, Row{Section: probeCPUSection, Case: mode.name, Metric: "client CPU per request", Runs: client, Unit: "ms", Note: note})
	}
	for m, mode := range modes {
		var server []float64
		for _, r := range results[m] {
			server = append(server, r.server)
		}
		rows = append(rows, Row{Section: probeCPUSection, Case: mode.name, Metric: "server CPU per request", Runs: server, Unit: "ms"})
	}
	ratio := func(num int) []float64 {
		var out []float64
		for run := range results[num] {
			out = append(out, results[num][run].client/results[modeKeepAlive][run].client)
		}
		return out
	}
	return append(rows,
		Row{Section: probeCPUSection, Case: "prober / keep-alive", Metric: "client CPU ratio", Runs: ratio(modeProber), Unit: "×",
			Note: "per run, prober (ConnectionPool) over bare keep-alive POST, same run"}.AtMost(2),
		Row{Section: probeCPUSection, Case: fmt.Sprintf("prober re-dialling every %d / keep-alive", probeCPURedialEvery), Metric: "client CPU ratio", Runs: ratio(modeRedial), Unit: "×",
			Note: "per run, the prober with its re-dial at a 1 s interval over bare keep-alive POST, same run"}.AtMost(2),
		Row{Section: probeCPUSection, Case: "fresh TCP+TLS / keep-alive", Metric: "client CPU ratio", Runs: ratio(modeFresh), Unit: "×"},
	)
}

// probeCPUNote is mode m's note in the table, ending with conns (the
// connections the server accepted).
func probeCPUNote(m int, conns string) string {
	switch m {
	case modeProber:
		return fmt.Sprintf("probe.Prober.Probe with the guard's ConnectionPool, connections warm (no re-dial while measured); %s. "+
			"Each mode: %d workers × %d requests after one warm-up request each, each worker to its own port (its own pooled connection, as one target); "+
			"CPU is getrusage(RUSAGE_SELF) user+sys of the bench process / %d; modes interleaved, order rotated per run. "+
			"The webhook (HTTP/1.1, ECDSA P-256, JSON decode and encode of the review) is another process; its rows are its own getrusage, read over a pipe before and after",
			conns, probeCPUWorkers, probeCPUPerWorker, probeCPUWorkers*probeCPUPerWorker)
	case modeRedial:
		return fmt.Sprintf("as the guard pays it at a 1 s interval: the pool's DefaultRedial (%s) dials once every %d probes; %s", probe.DefaultRedial, probeCPURedialEvery, conns)
	case modeKeepAlive:
		return "net/http POST of the prober's AdmissionReview body, connection reused; " + conns
	case modeFresh:
		return "net/http POST with DisableKeepAlives, default curve preferences; " + conns
	}
	return conns
}

// measureProbeCPU warms mode up (one request per worker), then sends
// probeCPUPerWorker requests from each of probeCPUWorkers workers and
// returns the CPU per request of this process and of the server.
func measureProbeCPU(ctx context.Context, srv *probeCPUServer, mode probeCPUMode) (probeCPUResult, error) {
	do, cleanup := mode.start()
	defer cleanup()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	for i := range probeCPUWorkers {
		wg.Go(func() {
			if err := do(ctx, i, -1); err != nil {
				fail(fmt.Errorf("warm-up: %w", err))
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return probeCPUResult{}, firstErr
	}
	// Collect the previous mode's garbage outside the measurement.
	runtime.GC()

	start := make(chan struct{})
	for i := range probeCPUWorkers {
		wg.Go(func() {
			<-start
			for n := range probeCPUPerWorker {
				if err := do(ctx, i, n); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	server0, conns0, err := srv.usage()
	if err != nil {
		close(start)
		wg.Wait()
		return probeCPUResult{}, fmt.Errorf("reading the server's CPU: %w", err)
	}
	client0 := selfCPU()
	close(start)
	wg.Wait()
	client1 := selfCPU()
	server1, conns1, err := srv.usage()
	if err == nil {
		err = firstErr
	}
	if err != nil {
		return probeCPUResult{}, err
	}
	n := float64(probeCPUWorkers * probeCPUPerWorker)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / n }
	return probeCPUResult{client: ms(client1 - client0), server: ms(server1 - server0), conns: conns1 - conns0}, nil
}

// probeCPUWebhook is a dry-run-safe webhook on one of the server's ports.
func probeCPUWebhook(i int, url string, caBundle []byte) admissionregistrationv1.MutatingWebhook {
	none := admissionregistrationv1.SideEffectClassNone
	timeout := int32(10)
	return admissionregistrationv1.MutatingWebhook{
		Name:         fmt.Sprintf("probecpu-%d.bench.webhook-guard.io", i),
		ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
		}},
		SideEffects:             &none,
		TimeoutSeconds:          &timeout,
		AdmissionReviewVersions: []string{"v1"},
	}
}

// capturedProbe sends one probe to an in-process server and returns the
// request URI and body the prober sent, for the bare POSTs to repeat.
func capturedProbe(mapper probe.Discovery) (uri string, body []byte, err error) {
	var mu sync.Mutex
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		mu.Lock()
		uri, body = r.URL.RequestURI(), data
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(data))
		allowReview(w, r)
	}))
	ts.Config.ErrorLog = log.New(io.Discard, "", 0)
	ts.StartTLS()
	defer ts.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	p := &probe.Prober{Discovery: mapper}
	if res := p.Probe(context.Background(), probeCPUWebhook(0, ts.URL+"/mutate", caPEM), probe.Spec{}); res.Outcome != probe.OutcomeHealthy {
		return "", nil, fmt.Errorf("probe %s: %v", res.Outcome, res.Err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(body) == 0 {
		return "", nil, errors.New("no body captured")
	}
	return uri, body, nil
}

// deploymentsOnly is discovery that serves apps/v1 deployments only, the
// resource the probe-CPU section's webhooks match.
type deploymentsOnly struct{}

func (deploymentsOnly) ServerGroupsAndResources() ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: "apps/v1", Version: "v1"}
	return []*metav1.APIGroup{{Name: "apps", Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}},
		[]*metav1.APIResourceList{{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
			{Name: "deployments", Namespaced: true, Kind: "Deployment", Verbs: metav1.Verbs{"create", "get"}},
		}}}, nil
}
