package main

// The "road" section: what the road check, the guard's continuous path
// probe (GETs through kube-apiserver's service proxy, at most
// one per breaker.PathProbeGap across all Services), costs
// kube-apiserver, at 100 and at 1,000 service-backed webhooks, each
// behind a Service of its own (the guard probes one road per Service and
// port, so 100 and 1,000 roads). Each run measures the same fleet twice,
// side by side: a guard without apiserverSignal.pathProbe.service (before)
// and one with it for every target (after), order alternated per run.
//
// The service proxy dials only a ready endpoint backed by a Pod, never
// the ClusterIP, and kube-apiserver rejects loopback endpoint addresses;
// so, as test/e2e/partition does, the section has a control plane of its
// own whose "cluster" egress is the harness's CONNECT proxy, and each
// Service's EndpointSlice names one Pod per fleet, on a port of its own,
// which the proxy routes to that webhook's loopback address. The proxy
// runs in this process: kube-apiserver's share of each GET is what it
// pays with konnectivity (a CONNECT, then TLS to the webhook).
//
// kube-apiserver's and the guard's CPU are /proc/<pid>/stat (user+sys)
// over -road-window, after -road-warmup; the probes are the guard's
// webhook_guard_path_probes_total.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/breaker"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

var (
	roadSizes  = flag.String("road-sizes", "100,1000", "Comma-separated numbers of service-backed webhooks (each behind its own Service) for the road section.")
	roadWindow = flag.Duration("road-window", time.Minute, "Measured window of each guard in the road section (two of the default 30 s /metrics reads).")
	roadQuota  = flag.Float64("road-quota", -1, "The guard's CPU limit in the road section, in cores: 0 for none; default the Deployment's.")
	roadWarmUp = flag.Duration("road-warmup", 0, "Wait after the guard serves its metrics before the road section measures (0: roadWarmUpFor the number of roads).")
)

func init() {
	register("road", roadCost)
}

const (
	// roadServiceCIDR is the road control plane's service range: inside
	// loopback, as harness.ServiceCIDR, but room for 1,000 ClusterIPs
	// and more.
	roadServiceCIDR = "127.0.16.0/20"
	// roadTargetPort is the first Pod port the EndpointSlices name, one
	// per Service.
	roadTargetPort = 20000
	roadSection    = "road check"
)

// roadEnv is the section's own control plane, with the CONNECT proxy as
// its cluster egress.
type roadEnv struct {
	env   *harness.Env
	proxy *harness.ConnectProxy
	pid   int
	// ips counts the ClusterIPs handed out; fleets count the fleets.
	ips, fleets int
}

// roadResult is one guard's window.
type roadResult struct {
	apiCores, guardCores float64
	// probesPerSec are path probes a second, every outcome; notHealthy
	// counts those not Healthy and circuits opened.
	probesPerSec, notHealthy float64
	// requestsPerSec are the guard's requests to kube-apiserver a second;
	// dialsPerSec the CONNECTs kube-apiserver's egress made a second (a
	// fresh dial each).
	requestsPerSec, dialsPerSec float64
}

func roadCost(ctx context.Context, b *Bench) ([]Row, error) {
	sizes, err := roadSizeList()
	if err != nil {
		return nil, err
	}
	limit := *roadQuota
	if limit < 0 {
		if limit, err = deploymentCPULimit(); err != nil {
			return nil, err
		}
	}
	r, err := startRoadEnv()
	if err != nil {
		return nil, err
	}
	defer r.stop()
	var rows []Row
	for _, n := range sizes {
		say("road: %d service-backed webhooks, each behind its own Service", n)
		f, err := r.newFleet(ctx, n)
		if err != nil {
			return rows, err
		}
		m, err := r.measure(ctx, f, limit, b.Runs)
		f.delete(ctx, r.env)
		if err != nil {
			return rows, err
		}
		rows = append(rows, roadRows(n, m, limit)...)
	}
	return rows, nil
}

func roadSizeList() ([]int, error) {
	var out []int
	for _, v := range strings.Split(*roadSizes, ",") {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-road-sizes: %q is not a number of webhooks", v)
		}
		out = append(out, n)
	}
	return out, nil
}

// startRoadEnv starts the CONNECT proxy, then etcd and a kube-apiserver
// whose cluster egress it is.
func startRoadEnv() (*roadEnv, error) {
	proxy, err := harness.StartConnectProxy()
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(filepath.Dir(proxy.SocketPath), "egress-selector.yaml")
	if err := os.WriteFile(cfg, proxy.EgressSelectorConfiguration(), 0o644); err != nil {
		proxy.Close()
		return nil, err
	}
	say("road: starting kube-apiserver (cluster egress through %s) and etcd", proxy.SocketPath)
	env, err := harness.Start(harness.Options{APIServerFlags: markingFlags(map[string]string{
		"egress-selector-config-file": cfg,
		"service-cluster-ip-range":    roadServiceCIDR,
	})})
	if err != nil {
		proxy.Close()
		return nil, err
	}
	r := &roadEnv{env: env, proxy: proxy}
	if u, err := url.Parse(env.Config.Host); err == nil {
		apiserverHost = u.Host // for the guard's rest_client_requests_total
	}
	if r.pid, err = apiserverPid(env); err != nil {
		r.stop()
		return nil, err
	}
	return r, nil
}

func (r *roadEnv) stop() {
	r.env.Stop()
	r.proxy.Close()
}

// nextIP is a ClusterIP in roadServiceCIDR no Service has had, past the
// first 256 (the apiserver's own Service takes the first).
func (r *roadEnv) nextIP() string {
	n := r.ips
	r.ips++
	return fmt.Sprintf("127.0.%d.%d", 17+n/250, 1+n%250)
}

// newFleet starts n webhooks in n/10 configurations, each webhook behind
// a Service of its own whose EndpointSlice names the fleet's Pod on a port
// that the CONNECT proxy routes to the webhook.
func (r *roadEnv) newFleet(ctx context.Context, n int) (*fleet, error) {
	r.fleets++
	f := &fleet{kind: "service", n: n, ns: fmt.Sprintf("bench-road-%d-%d", n, time.Now().UnixNano()%100000), roads: map[string]config.Service{}}
	if err := r.env.EnsureNamespace(ctx, f.ns); err != nil {
		return nil, err
	}
	podIP := fmt.Sprintf("10.254.0.%d", r.fleets)
	pod, err := roadPod(ctx, r.env, f.ns, podIP)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	for i := 0; i < max(n/perConfiguration, 1); i++ {
		name := fmt.Sprintf("%s-%d", f.ns, i)
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"bench": f.ns}}}
		for j := 0; j < min(n, perConfiguration); j++ {
			k := i*perConfiguration + j
			svc := config.Service{Namespace: f.ns, Name: fmt.Sprintf("hook-%d", k)}
			cc, err := r.roadWebhook(ctx, f, &svc, pod, podIP, roadTargetPort+k)
			if err != nil {
				f.close()
				return nil, err
			}
			mwc.Webhooks = append(mwc.Webhooks, fleetWebhook(webhookName(j, name), cc))
			f.roads[webhookName(j, name)] = svc
		}
		if err := r.env.Client.Create(ctx, mwc); err != nil {
			f.close()
			return nil, fmt.Errorf("creating %s: %w", name, err)
		}
		f.configs = append(f.configs, name)
	}
	say("road: %d webhooks, Services and EndpointSlices made in %s", n, time.Since(start).Round(time.Second))
	return f, nil
}

// roadWebhook starts one webhook server on a fresh ClusterIP, creates
// svc (its Port set here) and its EndpointSlice to pod's podIP:target,
// routes that address to the server, and returns the webhook's
// clientConfig.
func (r *roadEnv) roadWebhook(ctx context.Context, f *fleet, svc *config.Service, pod *corev1.Pod, podIP string, target int) (admissionregistrationv1.WebhookClientConfig, error) {
	var cc admissionregistrationv1.WebhookClientConfig
	ip := r.nextIP()
	srv, err := harness.StartTLSServer(harness.WebhookOptions{Host: ip, DNSNames: []string{svc.Name + "." + f.ns + ".svc"}}, f)
	if err != nil {
		return cc, err
	}
	f.servers = append(f.servers, srv)
	svc.Port = int32(srv.Port())
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: svc.Name}, Spec: corev1.ServiceSpec{
		ClusterIP: ip, Ports: []corev1.ServicePort{{Name: "https", Port: svc.Port, Protocol: corev1.ProtocolTCP}},
	}}
	if err := r.env.Client.Create(ctx, s); err != nil {
		return cc, fmt.Errorf("creating Service %s/%s: %w", f.ns, svc.Name, err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: f.ns, Name: svc.Name + "-x1", Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{podIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: f.ns, Name: pod.Name, UID: pod.UID},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(target)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if err := r.env.Client.Create(ctx, slice); err != nil {
		return cc, fmt.Errorf("creating EndpointSlice %s/%s: %w", f.ns, slice.Name, err)
	}
	r.proxy.Route(net.JoinHostPort(podIP, strconv.Itoa(target)), srv.Addr())
	cc.CABundle = srv.CA.CertPEM
	cc.Service = &admissionregistrationv1.ServiceReference{Namespace: f.ns, Name: svc.Name, Port: ptr.To(svc.Port), Path: ptr.To("/review")}
	return cc, nil
}

// roadPod creates a Pod in ns whose status holds podIP, as the service
// proxy needs behind an endpoint. There is no kubelet; the status is
// written as one would.
func roadPod(ctx context.Context, env *harness.Env, ns, podIP string) (*corev1.Pod, error) {
	if err := env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhooks-0"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "webhook", Image: "webhook:latest"}}},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		return nil, err
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: podIP, PodIPs: []corev1.PodIP{{IP: podIP}}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		return nil, err
	}
	return pod, nil
}

// roadMeasured is what measure found for one fleet.
type roadMeasured struct {
	// off and on are the guards' windows without and with the path
	// probe, by run.
	off, on []roadResult
	bursts  []roadBurstResult
}

// measure grants the guard its path probe RBAC, waits until the service
// proxy reaches the fleet's first and last webhooks, measures the GETs
// alone (measureBursts), then a guard without the path probe (off) and one
// with it (on), in each of runs runs, order alternated.
func (r *roadEnv) measure(ctx context.Context, f *fleet, limit float64, runs int) (m roadMeasured, err error) {
	if err := f.identity(ctx, r.env); err != nil {
		return m, err
	}
	services := make([]config.Service, 0, len(f.roads))
	for _, s := range f.roads {
		services = append(services, s)
	}
	if err := r.env.GrantPathProbe(ctx, f.id, services...); err != nil {
		return m, err
	}
	if err := r.waitRoads(ctx, f); err != nil {
		return m, err
	}
	if m.bursts, err = r.measureBursts(ctx, f); err != nil {
		return m, err
	}
	for run := range runs {
		for k := range 2 {
			withProbe := (run+k)%2 == 1
			res, err := r.measureGuard(ctx, f, limit, withProbe)
			if err != nil {
				return m, err
			}
			say("road run %d, %d webhooks, path probe %v: kube-apiserver %.4f cores, guard %.4f cores, %.2f path probes/s, %.0f not Healthy, guard requests %.2f/s, CONNECTs %.2f/s",
				run+1, f.n, withProbe, res.apiCores, res.guardCores, res.probesPerSec, res.notHealthy, res.requestsPerSec, res.dialsPerSec)
			if withProbe {
				m.on = append(m.on, res)
			} else {
				m.off = append(m.off, res)
			}
		}
	}
	return m, nil
}

// waitRoads waits until a path probe of the fleet's first and last
// webhooks is Healthy: the apiserver's EndpointSlice informer has them.
func (r *roadEnv) waitRoads(ctx context.Context, f *fleet) error {
	p := &probe.PathProber{Client: r.env.Clientset.CoreV1().RESTClient()}
	first, last := f.roads[webhookName(0, f.configs[0])], f.roads[webhookName(min(f.n, perConfiguration)-1, f.configs[len(f.configs)-1])]
	deadline := time.Now().Add(time.Minute)
	for _, s := range []config.Service{first, last} {
		ref := admissionregistrationv1.ServiceReference{Namespace: s.Namespace, Name: s.Name, Port: ptr.To(s.Port)}
		for {
			res := p.Probe(ctx, ref, "/review", 2*time.Second)
			if res.Outcome == probe.OutcomeHealthy {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("the service proxy never reached %s/%s: %s %v", s.Namespace, s.Name, res.Outcome, res.Err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// roadBurst is how many GETs measureBursts sends in each way, at most.
const roadBurst = 200

// measureBursts measures kube-apiserver's CPU per service proxy GET
// without the guard, from this process, back to back after a 5 s idle
// window: to each of up to roadBurst roads not yet used (a fresh CONNECT
// and TLS dial each), and to one road again and again (a pooled
// connection), as the admin and as the guard's ServiceAccount (whose
// every request RBAC authorizes). It runs before any guard, so those
// roads are cold.
func (r *roadEnv) measureBursts(ctx context.Context, f *fleet) ([]roadBurstResult, error) {
	admin := &probe.PathProber{Client: r.env.Clientset.CoreV1().RESTClient()}
	cs, err := kubernetes.NewForConfig(f.id.Config)
	if err != nil {
		return nil, err
	}
	guard := &probe.PathProber{Client: cs.CoreV1().RESTClient()}
	var refs []admissionregistrationv1.ServiceReference
	for _, c := range f.configs {
		for j := 0; j < min(f.n, perConfiguration); j++ {
			s := f.roads[webhookName(j, c)]
			refs = append(refs, admissionregistrationv1.ServiceReference{Namespace: s.Namespace, Name: s.Name, Port: ptr.To(s.Port)})
		}
	}
	// waitRoads used the first and the last.
	cold := refs[1:min(len(refs)-1, 1+roadBurst)]
	coldRoad := func(i int) admissionregistrationv1.ServiceReference { return cold[i] }
	oneRoad := func(int) admissionregistrationv1.ServiceReference { return refs[0] }
	ways := []struct {
		name string
		p    *probe.PathProber
		ref  func(i int) admissionregistrationv1.ServiceReference
		n    int
		pace time.Duration // between GETs; 0: back to back
	}{
		{"each road once (fresh CONNECT and TLS dial)", admin, coldRoad, len(cold), 0},
		// The roads the first way dialled, in turn at the guard's steady
		// budget, as its ServiceAccount: a path probe's pace, without the
		// guard. Second, so that each road comes back within the 90 s
		// kube-apiserver keeps its connection.
		{fmt.Sprintf("each road in turn, one every %s, as the guard's ServiceAccount (pooled)", breaker.PathProbeGap), guard, coldRoad, len(cold), breaker.PathProbeGap},
		{"one road again and again (pooled connection)", admin, oneRoad, roadBurst, 0},
		{"one road again and again, as the guard's ServiceAccount (pooled)", guard, oneRoad, roadBurst, 0},
	}
	var out []roadBurstResult
	for _, w := range ways {
		var first time.Time // the first paced GET's start
		ms, settled, err := r.burst(ctx, w.n, func(ctx context.Context, i int) error {
			if w.pace > 0 {
				if i == 0 {
					first = time.Now()
				}
				if err := sleepCtx(ctx, time.Until(first.Add(time.Duration(i)*w.pace))); err != nil {
					return err
				}
			}
			if res := w.p.Probe(ctx, w.ref(i), "/review", 5*time.Second); res.Outcome != probe.OutcomeHealthy {
				return fmt.Errorf("path probe %s: %v", res.Outcome, res.Err)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", w.name, err)
		}
		say("road: %d webhooks: kube-apiserver CPU per GET, %s: %.3f ms, %.3f ms with the %s after (%d GETs)", f.n, w.name, ms, settled, roadBurstSettle, w.n)
		out = append(out, roadBurstResult{w.name, ms, settled, w.n})
	}
	return out, nil
}

// roadBurstResult is one way of measureBursts: kube-apiserver's CPU per
// GET, over n GETs, back to back (ms) and with the work they leave for
// the roadBurstSettle after (settled).
type roadBurstResult struct {
	name        string
	ms, settled float64
	n           int
}

// roadBurstSettle is how long after a burst its CPU is still counted in
// the settled cost: kube-apiserver's collector runs the cycles that the
// burst's garbage calls for after the last GET, and a steady probe pays
// for them too.
const roadBurstSettle = 5 * time.Second

// burst runs get n times after a 5 s idle window and returns
// kube-apiserver's CPU per call in ms, less its idle rate: over the calls
// alone, and over the calls and the roadBurstSettle after them.
func (r *roadEnv) burst(ctx context.Context, n int, get func(ctx context.Context, i int) error) (ms, settled float64, err error) {
	api0, err := cpuSeconds(r.pid)
	idleStart := time.Now()
	if err := errors.Join(err, sleepCtx(ctx, 5*time.Second)); err != nil {
		return 0, 0, err
	}
	api1, err := cpuSeconds(r.pid)
	start := time.Now()
	idleRate := (api1 - api0) / start.Sub(idleStart).Seconds()
	for i := range n {
		if err == nil {
			err = get(ctx, i)
		}
	}
	api2, err2 := cpuSeconds(r.pid)
	burst := time.Since(start)
	err3 := sleepCtx(ctx, roadBurstSettle)
	api3, err4 := cpuSeconds(r.pid)
	if err := errors.Join(err, err2, err3, err4); err != nil {
		return 0, 0, err
	}
	ms = 1000 * max(0, api2-api1-idleRate*burst.Seconds()) / float64(n)
	settled = 1000 * max(0, api3-api1-idleRate*time.Since(start).Seconds()) / float64(n)
	return ms, settled, nil
}

// measureGuard runs a guard over f, with the path probe of every target
// or without, and measures kube-apiserver, the guard and its path probes
// over -road-window after -road-warmup.
func (r *roadEnv) measureGuard(ctx context.Context, f *fleet, limit float64, withProbe bool) (roadResult, error) {
	f.pathProbe = withProbe
	g, err := startGuard(ctx, r.env, f, "Ignore", 3, limit, true)
	if err != nil {
		return roadResult{}, err
	}
	defer g.stop()
	if err := g.waitServing(ctx); err != nil {
		return roadResult{}, err
	}
	if err := sleepCtx(ctx, roadWarmUpFor(f.n)); err != nil {
		return roadResult{}, err
	}
	m0, err := g.metrics(ctx)
	if err != nil {
		return roadResult{}, err
	}
	if *profileDir != "" {
		// kube-apiserver's CPU profile over the window, with and without
		// the path probe: where its CPU per path probe goes.
		go func() {
			_ = apiserverProfile(ctx, r.env, fmt.Sprintf("road-%d-pathprobe-%v", f.n, withProbe), *roadWindow-5*time.Second)
		}()
	}
	api0, err0 := cpuSeconds(r.pid)
	guard0, err1 := cpuSeconds(g.g.Pid())
	dials0, _ := r.proxy.Tunnels()
	start := time.Now()
	if err := errors.Join(err0, err1, sleepCtx(ctx, *roadWindow)); err != nil {
		return roadResult{}, err
	}
	api1, err0 := cpuSeconds(r.pid)
	guard1, err1 := cpuSeconds(g.g.Pid())
	dials1, _ := r.proxy.Tunnels()
	elapsed := time.Since(start).Seconds()
	m1, err := g.metrics(ctx)
	if err := errors.Join(err0, err1, err); err != nil {
		return roadResult{}, err
	}
	const paths = "webhook_guard_path_probes_total"
	d := func(name string) float64 { return m1[name] - m0[name] }
	return roadResult{
		apiCores:     (api1 - api0) / elapsed,
		guardCores:   (guard1 - guard0) / elapsed,
		probesPerSec: d(paths) / elapsed,
		notHealthy:   d(paths) - d(paths+`{outcome="Healthy"}`) + m1["webhook_guard_circuit_openings_total"],
		// The guard's own requests to kube-apiserver (rest_client_requests_total).
		requestsPerSec: d("rest_client_requests_total") / elapsed,
		dialsPerSec:    float64(dials1-dials0) / elapsed,
	}, nil
}

// roadRows are one fleet's rows, one value per run: kube-apiserver's
// cores before and after, their difference and ratio, the path probes a
// second, kube-apiserver's CPU per path probe, and the guard's cores.
func roadRows(n int, m roadMeasured, limit float64) []Row {
	off, on := m.off, m.on
	name := fmt.Sprintf("%d webhooks, %d Services", n, n)
	col := func(rs []roadResult, get func(roadResult) float64) []float64 {
		var out []float64
		for _, r := range rs {
			out = append(out, get(r))
		}
		return out
	}
	pair := func(get func(off, on roadResult) float64) []float64 {
		var out []float64
		for i := range min(len(off), len(on)) {
			out = append(out, get(off[i], on[i]))
		}
		return out
	}
	api := func(r roadResult) float64 { return r.apiCores }
	row := func(metric, unit string, runs []float64) Row {
		return Row{Section: roadSection, Case: name, Metric: metric, Unit: unit, Runs: runs}
	}
	before := row("kube-apiserver cores, no path probe (before)", " cores", col(off, api))
	before.Note = fmt.Sprintf("each webhook behind its own Service, kube-apiserver's cluster egress a CONNECT proxy routing one Pod's ports to the webhooks on loopback; "+
		"a fresh guard (the real binary, in a CFS quota of %.2g core (0: none), the fleet configuration: defaults, 1 s probes) per window, with apiserverSignal.pathProbe.service for every target (after) or none (before), "+
		"same fleet, order alternated per run; CPU is /proc/<pid>/stat over %s after %s; budget one path probe per %s",
		limit, *roadWindow, roadWarmUpFor(n), breaker.PathProbeGap)
	rows := []Row{
		before,
		row("kube-apiserver cores, path probe on (after)", " cores", col(on, api)),
		row("kube-apiserver cores, after − before", " cores", pair(func(a, b roadResult) float64 { return b.apiCores - a.apiCores })).AtMost(0.01),
		row("kube-apiserver CPU, after / before", "×", pair(func(a, b roadResult) float64 { return b.apiCores / a.apiCores })),
		row("path probes a second (after)", "/s", col(on, func(r roadResult) float64 { return r.probesPerSec })).AtMost(float64(time.Second)/float64(breaker.PathProbeGap) + 1/roadWindow.Seconds()), // a window may hold one start more
		row("kube-apiserver CPU per path probe", " ms", pair(func(a, b roadResult) float64 { return 1000 * (b.apiCores - a.apiCores) / b.probesPerSec })),
		row("guard requests to kube-apiserver a second, before", "/s", col(off, func(r roadResult) float64 { return r.requestsPerSec })),
		row("guard requests to kube-apiserver a second, after", "/s", col(on, func(r roadResult) float64 { return r.requestsPerSec })),
		row("kube-apiserver's fresh dials (CONNECTs) per path probe", "", col(on, func(r roadResult) float64 { return r.dialsPerSec / r.probesPerSec })),
		row("guard cores, before", " cores", col(off, func(r roadResult) float64 { return r.guardCores })),
		row("guard cores, after", " cores", col(on, func(r roadResult) float64 { return r.guardCores })),
		row("path probes not Healthy, circuits opened", "", col(slices.Concat(off, on), func(r roadResult) float64 { return r.notHealthy })).AtMost(0),
	}
	for i, b := range m.bursts {
		r := row("kube-apiserver CPU per GET, "+b.name, " ms", []float64{b.ms})
		if i == 0 {
			r.Note = fmt.Sprintf("no guard: up to %d service proxy GETs from the bench back to back (as the admin, a system:masters client certificate, unless said), less kube-apiserver's rate over the 5 s before, before any guard ran", b.n)
		}
		rows = append(rows, r)
		r = row("... the same with the "+roadBurstSettle.String()+" after the GETs", " ms", []float64{b.settled})
		if i == 0 {
			r.Note = "the work the GETs leave behind, such as the collections their garbage calls for, counted too"
		}
		rows = append(rows, r)
	}
	return rows
}

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// proxyIdleTimeout is how long kube-apiserver's service proxy transport
// keeps an idle connection to an endpoint (utilnet.SetTransportDefaults:
// http.DefaultTransport's IdleConnTimeout).
const proxyIdleTimeout = 90 * time.Second

// roadWarmUpFor is the warm-up before a window at roads roads: -road-warmup
// when set; else, when the schedule comes back to each road before
// kube-apiserver drops its idle connection to it, one full sweep of the
// roads and 5 s more, so that the window measures the steady state (each
// road's connection kept alive) and not the guard's first dial of every
// road; else (every probe a fresh dial anyway) 15 s.
func roadWarmUpFor(roads int) time.Duration {
	if *roadWarmUp > 0 {
		return *roadWarmUp
	}
	sweep := time.Duration(roads) * breaker.PathProbeGap
	if sweep < proxyIdleTimeout {
		return sweep + 5*time.Second
	}
	return 15 * time.Second
}
