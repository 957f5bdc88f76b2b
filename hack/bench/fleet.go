package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// perConfiguration is how many webhooks each configuration of a fleet has.
const perConfiguration = 10

// fleet is n healthy webhooks, each its own TLS endpoint with its own CA,
// in n/10 MutatingWebhookConfigurations, reached by clientConfig.url or
// through a Service (one per configuration, one port per webhook). Their
// rules match ConfigMaps in no namespace, so only the guard calls them.
type fleet struct {
	kind    string // "url" or "service"
	n       int
	ns      string
	configs []string
	servers []*harness.TLSServer
	failing atomic.Bool
	// scrapeInterval, when set, is the guard's apiserverScrapeInterval;
	// otherwise its default.
	scrapeInterval string
	// roads names each webhook's Service and port, by webhook name, for
	// the guard's path probe (apiserverSignal.pathProbe.service); config
	// sets it while pathProbe is true.
	roads     map[string]config.Service
	pathProbe bool
	// hang makes a failing webhook hang until the call gives up (or the
	// fleet recovers) instead of answering HTTP 500 at once.
	hang bool
	// defaults leaves every circuit setting to the guard's defaults in
	// config (holdWhenAllFail, openAfter, closeAfter, the probe's interval
	// and timeout); only the mode is written, and only when not Ignore.
	defaults bool

	// The guard's identity and the metrics reader's token, made once per
	// fleet and shared by its guards' runs.
	id      *harness.Identity
	scraper string
}

// newFleet starts the webhooks and creates their configurations.
func newFleet(ctx context.Context, env *harness.Env, kind string, n int) (*fleet, error) {
	f := &fleet{kind: kind, n: n, ns: fmt.Sprintf("bench-%s-%d-%d", kind, n, time.Now().UnixNano()%100000)}
	if err := env.EnsureNamespace(ctx, f.ns); err != nil {
		return nil, err
	}
	for i := 0; i < max(n/perConfiguration, 1); i++ {
		name := fmt.Sprintf("%s-%d", f.ns, i)
		host, svc := "127.0.0.1", ""
		if kind == "service" {
			host, svc = harness.NextServiceIP(), fmt.Sprintf("webhooks-%d", i)
		}
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"bench": f.ns}}}
		var ports []corev1.ServicePort
		for j := 0; j < min(n, perConfiguration); j++ {
			srv, err := harness.StartTLSServer(harness.WebhookOptions{Host: host, DNSNames: []string{svc + "." + f.ns + ".svc"}}, f)
			if err != nil {
				f.close()
				return nil, err
			}
			f.servers = append(f.servers, srv)
			cc := admissionregistrationv1.WebhookClientConfig{CABundle: srv.CA.CertPEM}
			if kind == "service" {
				port := int32(srv.Port())
				ports = append(ports, corev1.ServicePort{Name: fmt.Sprintf("w%d", j), Port: port, Protocol: corev1.ProtocolTCP})
				cc.Service = &admissionregistrationv1.ServiceReference{Namespace: f.ns, Name: svc, Port: ptr.To(port), Path: ptr.To("/review")}
			} else {
				cc.URL = ptr.To(srv.URL("/review"))
			}
			mwc.Webhooks = append(mwc.Webhooks, fleetWebhook(webhookName(j, name), cc))
		}
		if kind == "service" {
			s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: svc}, Spec: corev1.ServiceSpec{ClusterIP: host, Ports: ports}}
			if err := env.Client.Create(ctx, s); err != nil {
				f.close()
				return nil, fmt.Errorf("creating Service %s/%s: %w", f.ns, svc, err)
			}
		}
		if err := env.Client.Create(ctx, mwc); err != nil {
			f.close()
			return nil, fmt.Errorf("creating %s: %w", name, err)
		}
		f.configs = append(f.configs, name)
	}
	return f, nil
}

func webhookName(j int, configuration string) string {
	return fmt.Sprintf("w%d.%s.bench.example.com", j, configuration)
}

// fleetWebhook is a fleet's webhook: Fail, timeoutSeconds 1, matching
// ConfigMaps in no namespace.
func fleetWebhook(name string, cc admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.MutatingWebhook {
	return admissionregistrationv1.MutatingWebhook{
		Name:                    name,
		ClientConfig:            cc,
		AdmissionReviewVersions: []string{"v1"},
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
		TimeoutSeconds:          ptr.To[int32](1),
		NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"bench.example.com/never": "true"}},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
		}},
	}
}

// ServeHTTP answers an AdmissionReview as allowed (allowReview), or,
// while the fleet is failing, HTTP 500, or nothing until the caller gives
// up or the fleet recovers (hang).
func (f *fleet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for f.failing.Load() && f.hang {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	if f.failing.Load() {
		http.Error(w, "failing on purpose", http.StatusInternalServerError)
		return
	}
	allowReview(w, r)
}

// config is the guard's configuration for every webhook of the fleet:
// probes every second with a 1 s timeout, open after 3 failures, close
// after 5 successes, holdWhenAllFail hold; with f.defaults, only the
// mode, and that only when it is not the default (Ignore).
func (f *fleet) config(mode string, hold int) string {
	var b strings.Builder
	b.WriteString("apiVersion: config.webhook-guard.io/v1alpha1\nkind: GuardConfiguration\n")
	if !f.defaults {
		fmt.Fprintf(&b, "holdWhenAllFail: %d\n", hold)
	}
	if f.scrapeInterval != "" {
		fmt.Fprintf(&b, "apiserverScrapeInterval: %s\n", f.scrapeInterval)
	}
	b.WriteString("targets:\n")
	for _, c := range f.configs {
		for j := 0; j < min(f.n, perConfiguration); j++ {
			if f.defaults {
				fmt.Fprintf(&b, "- configuration: %s\n  webhook: %s\n  allowAdmissionWithoutMutation: true\n", c, webhookName(j, c))
				if mode != string(config.DefaultMode) {
					fmt.Fprintf(&b, "  mode: %s\n", mode)
				}
				continue
			}
			fmt.Fprintf(&b, "- configuration: %s\n  webhook: %s\n  allowAdmissionWithoutMutation: true\n  mode: %s\n  openAfter: 3\n  closeAfter: 5\n  probe:\n    interval: 1s\n    timeout: 1s\n", c, webhookName(j, c), mode)
			if svc, ok := f.roads[webhookName(j, c)]; ok && f.pathProbe {
				fmt.Fprintf(&b, "  apiserverSignal:\n    pathProbe:\n      service:\n        namespace: %s\n        name: %s\n        port: %d\n", svc.Namespace, svc.Name, svc.Port)
			}
		}
	}
	return b.String()
}

func (f *fleet) close() {
	for _, s := range f.servers {
		s.Close()
	}
}

// opened counts the fleet's webhooks whose failurePolicy is no longer
// Fail, or that have a circuit record: any opening shows on the objects.
func (f *fleet) opened(ctx context.Context, env *harness.Env) (int, error) {
	list := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	if err := env.Client.List(ctx, list, client.MatchingLabels{"bench": f.ns}); err != nil {
		return 0, err
	}
	n := 0
	for _, m := range list.Items {
		if m.Annotations[circuit.Annotation] != "" {
			n++
			continue
		}
		for _, w := range m.Webhooks {
			if *w.FailurePolicy != admissionregistrationv1.Fail {
				n++
			}
		}
	}
	return n, nil
}

// delete removes the configurations (and with the namespace the Services).
func (f *fleet) delete(ctx context.Context, env *harness.Env) {
	f.close()
	_ = env.Client.DeleteAllOf(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{}, client.MatchingLabels{"bench": f.ns})
	_ = env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}})
}

// guardRun is one guard process over a fleet, optionally inside a CPU
// limit, with what it takes to measure it.
type guardRun struct {
	g          *harness.Guard
	pprofAddr  string
	metricsURL string
	token      string
	cg         *cgroup
}

// startGuard runs the real guard binary for f as its own ServiceAccount,
// with leader election as the Deployment runs it (unless leaderElect is
// false), logging at info level, inside a CPU limit of quota cores when
// quota > 0.
func startGuard(ctx context.Context, env *harness.Env, f *fleet, mode string, hold int, quota float64, leaderElect bool) (*guardRun, error) {
	if err := f.identity(ctx, env); err != nil {
		return nil, err
	}
	id, scraper := f.id, f.scraper
	addr, err := harness.FreeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"--zap-log-level", "info", "--metrics-bind-address", addr}
	if leaderElect {
		args = append(args, "--leader-elect", "--leader-election-namespace", f.ns)
	}
	pprofAddr := ""
	if *profileDir != "" {
		if pprofAddr, err = harness.FreeLoopbackAddr(); err != nil {
			return nil, err
		}
		args = append(args, "--pprof-bind-address", pprofAddr)
	}
	restore := setGuardEnv()
	g, err := env.StartGuard(harness.GuardOptions{Name: f.ns, Kubeconfig: id.KubeconfigPath, Config: f.config(mode, hold), Args: args, WithoutMarking: !*withMarking})
	restore()
	if err != nil {
		return nil, err
	}
	r := &guardRun{g: g, pprofAddr: pprofAddr, metricsURL: "https://" + addr + "/metrics", token: scraper}
	if quota > 0 {
		if r.cg, err = newCgroup(quota); err != nil {
			say("no CPU limit: %v", err)
		} else if err := r.cg.add(g.Pid()); err != nil {
			g.Stop()
			return nil, err
		}
	}
	return r, nil
}

// identity makes f's guard identity and metrics reader, once.
func (f *fleet) identity(ctx context.Context, env *harness.Env) error {
	if f.id != nil {
		return nil
	}
	id, err := env.ServiceAccount(ctx, f.ns, "webhook-guard")
	if err != nil {
		return err
	}
	if err := env.GrantGuard(ctx, f.ns, id, f.configs); err != nil {
		return err
	}
	if f.scraper, err = metricsReader(ctx, env, f.ns); err != nil {
		return err
	}
	f.id = id
	return nil
}

// withMarking (-marking=false) runs the control plane without
// MutatingAdmissionPolicy, as before Kubernetes 1.36, and so the guard
// without marking: to tell the marking policies' cost in kube-apiserver
// from the guard's own.
var withMarking = flag.Bool("marking", true, "Serve MutatingAdmissionPolicy and install the marking policies of the fleet's webhooks, as a user does (false: a control plane without MutatingAdmissionPolicy, and a guard without marking).")

// guardEnv (-guard-env) is extra environment for the guard process only,
// such as GOMEMLIMIT or GOGC: set in the bench's own environment the
// control plane would inherit it too.
var guardEnv = flag.String("guard-env", "", "Comma-separated NAME=value pairs set in the guard's environment only (e.g. GOMEMLIMIT=100MiB,GOGC=50).")

// setGuardEnv sets guardEnv in this process's environment, which the
// guard inherits when it starts, and returns what restores it.
func setGuardEnv() (restore func()) {
	var undo []func()
	for _, kv := range strings.Split(*guardEnv, ",") {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			continue
		}
		old, had := os.LookupEnv(name)
		_ = os.Setenv(name, value)
		undo = append(undo, func() {
			if had {
				_ = os.Setenv(name, old)
			} else {
				_ = os.Unsetenv(name)
			}
		})
	}
	return func() {
		for _, u := range undo {
			u()
		}
	}
}

// profileDir, when set (-profile), receives a CPU profile and a heap
// profile of the guard for every measured window, and kube-apiserver's
// while a mass failure opens.
var profileDir = flag.String("profile", "", "Write the guard's CPU and heap profiles of each scale window, and kube-apiserver's of a mass failure's opening and of each road window, to this folder.")

// profile saves the guard's CPU profile over d and then its heap profile
// to profileDir, named after name.
func (r *guardRun) profile(ctx context.Context, name string, d time.Duration) error {
	if r.pprofAddr == "" {
		return nil
	}
	return saveProfiles(ctx, http.DefaultClient, "http://"+r.pprofAddr, name, d)
}

// apiserverProfile saves kube-apiserver's CPU profile over d and then its
// heap profile to profileDir, named after name and "apiserver": where the
// control plane's time goes while the guard works.
func apiserverProfile(ctx context.Context, env *harness.Env, name string, d time.Duration) error {
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		return err
	}
	return saveProfiles(ctx, hc, strings.TrimSuffix(env.Config.Host, "/"), name+".apiserver", d)
}

// saveProfiles saves the CPU profile over d, then the heap profile, the
// goroutine profile and the runtime's memory statistics (the heap profile's
// text form, which ends with them: stacks are not in the heap profile but
// are in the RSS) served under base's /debug/pprof to profileDir, as
// name.cpu.pprof, name.heap.pprof, name.goroutine.pprof and
// name.memstats.txt.
func saveProfiles(ctx context.Context, hc *http.Client, base, name string, d time.Duration) error {
	for _, p := range []struct{ path, file string }{
		{fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.Seconds())), name + ".cpu.pprof"},
		{"/debug/pprof/heap", name + ".heap.pprof"},
		{"/debug/pprof/goroutine", name + ".goroutine.pprof"},
		{"/debug/pprof/heap?debug=1", name + ".memstats.txt"},
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+p.path, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if err := os.MkdirAll(*profileDir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(*profileDir, p.file), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// apiserverRequests reads kube-apiserver's request counts by verb,
// resource and dry run (apiserver_request_total), keyed "VERB resource
// [dry run]".
func apiserverRequests(ctx context.Context, env *harness.Env) (map[string]float64, error) {
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(env.Config.Host, "/")+"/metrics?name[]=apiserver_request_total", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		key := labelValue(m.GetLabel(), "verb") + " " + labelValue(m.GetLabel(), "resource")
		if labelValue(m.GetLabel(), "dry_run") != "" {
			key += " [dry run]"
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out, nil
}

// logDir (-guard-logs), when set, receives each guard's log when it
// stops, named after its fleet and the time.
var logDir = flag.String("guard-logs", "", "Write each guard's log to this folder when it stops.")

func (r *guardRun) stop() {
	r.g.Stop()
	if *logDir != "" {
		if err := os.MkdirAll(*logDir, 0o755); err == nil {
			_ = os.WriteFile(filepath.Join(*logDir, fmt.Sprintf("%s-%d.log", r.g.Name, time.Now().UnixNano())), []byte(r.g.Logs()), 0o644)
		}
	}
	if r.cg != nil {
		r.cg.remove()
	}
}

// metricsReader returns the token of a ServiceAccount allowed to read the
// guard's metrics endpoint, as Prometheus would be.
func metricsReader(ctx context.Context, env *harness.Env, ns string) (string, error) {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}
	if err := env.Client.Create(ctx, role); err != nil && !strings.Contains(err.Error(), "already exists") {
		return "", err
	}
	id, err := env.ServiceAccount(ctx, ns, "metrics-reader")
	if err != nil {
		return "", err
	}
	if err := env.Bind(ctx, "bench-metrics-reader-"+ns, role.Name, ns, "metrics-reader"); err != nil {
		return "", err
	}
	return id.Token, nil
}

// metrics reads the guard's metrics endpoint. Its serving certificate is
// self-signed (controller-runtime's default without a cert dir), so the
// bench does not verify it; it only ever dials loopback.
func (r *guardRun) metrics(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.metricsURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback, self-signed
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("guard metrics: %s: %s", resp.Status, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, mf := range families {
		for _, m := range mf.Metric {
			if name == "rest_client_requests_total" && !toAPIServer(m.GetLabel()) {
				// The probe sends its AdmissionReviews with kube-apiserver's
				// own webhook client, which client-go counts here too.
				continue
			}
			switch {
			case m.Counter != nil:
				out[name] += m.Counter.GetValue()
				if o := labelValue(m.GetLabel(), "outcome"); o != "" {
					out[name+`{outcome="`+o+`"}`] += m.Counter.GetValue()
				}
			case m.Gauge != nil:
				out[name] += m.Gauge.GetValue()
			case m.Histogram != nil:
				out[name+"_count"] += float64(m.Histogram.GetSampleCount())
				for _, b := range m.Histogram.Bucket {
					out[name+"_bucket_le_"+strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)] += float64(b.GetCumulativeCount())
				}
			}
		}
	}
	return out, nil
}

// labelValue is the value of the label name, or "".
func labelValue(labels []*dto.LabelPair, name string) string {
	for _, l := range labels {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// toAPIServer reports whether a rest_client_requests_total series is of
// requests to kube-apiserver: the bench's control plane listens on
// 127.0.0.1 and the fleet's webhooks do too, so it tells them apart by
// the host label the apiserver's clients set (its port).
func toAPIServer(labels []*dto.LabelPair) bool {
	for _, l := range labels {
		if l.GetName() == "host" {
			return apiserverHost != "" && l.GetValue() == apiserverHost
		}
	}
	return false
}

// apiserverHost is the control plane's host:port, set with the env.
var apiserverHost string

// waitServing waits until the guard's metrics endpoint answers: a guard in
// a small CPU limit takes a while to start.
func (r *guardRun) waitServing(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := r.metrics(ctx)
		if err == nil {
			return nil
		}
		if exited, code := r.g.Exited(); exited {
			return fmt.Errorf("the guard exited with %d before serving its metrics\n%s", code, r.g.Logs())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the guard's metrics did not answer in 2 minutes: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// cpuSeconds is the CPU time pid has used, user and system, all threads.
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; fields start after its ")".
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100, nil // USER_HZ is 100 on Linux
}

// rssMiB is pid's resident set size (VmRSS), and the anonymous part of it
// (RssAnon): the part a memory limit cannot reclaim. The rest is mostly
// the binary's own pages, which the kernel drops under pressure.
func rssMiB(pid int) (rss, anon float64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for _, line := range strings.Split(string(data), "\n") {
		for name, v := range map[string]*float64{"VmRSS:": &rss, "RssAnon:": &anon} {
			if strings.HasPrefix(line, name) {
				kb, err := strconv.ParseFloat(strings.Fields(line)[1], 64)
				if err != nil {
					return 0, 0, err
				}
				*v = kb / 1024
				found++
			}
		}
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("no VmRSS or RssAnon for %d", pid)
	}
	return rss, anon, nil
}

// cgroup is a CPU limit like the Deployment's: a CFS quota per 100 ms.
type cgroup struct{ dir string }

// newCgroup creates a cgroup (v1 cpu controller, or v2) limited to quota
// cores.
func newCgroup(quota float64) (*cgroup, error) {
	name := fmt.Sprintf("webhook-guard-bench-%d-%d", os.Getpid(), time.Now().UnixNano())
	us := strconv.Itoa(int(quota * 100000))
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err == nil {
		dir := filepath.Join("/sys/fs/cgroup/cpu", name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(us), 0o644); err != nil {
			_ = os.Remove(dir)
			return nil, err
		}
		return &cgroup{dir: dir}, nil
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		dir := filepath.Join("/sys/fs/cgroup", name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(us+" 100000"), 0o644); err != nil {
			_ = os.Remove(dir)
			return nil, err
		}
		return &cgroup{dir: dir}, nil
	}
	return nil, fmt.Errorf("no writable cgroup cpu controller")
}

func (c *cgroup) add(pid int) error {
	return os.WriteFile(filepath.Join(c.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
}

// throttled returns the periods so far and those in which the quota ran
// out.
func (c *cgroup) throttled() (periods, throttled float64) {
	data, _ := os.ReadFile(filepath.Join(c.dir, "cpu.stat"))
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "nr_periods":
			periods = v
		case "nr_throttled":
			throttled = v
		}
	}
	return periods, throttled
}

func (c *cgroup) remove() {
	for range 50 {
		if err := os.Remove(c.dir); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond) // until the killed process has left it
	}
}

// deploymentCPULimit is the guard container's CPU limit in the
// Deployment that install.yaml ships, in cores.
func deploymentCPULimit() (float64, error) {
	q, err := deploymentLimit(corev1.ResourceCPU)
	return q.AsApproximateFloat64(), err
}

// deploymentMemoryLimitMiB is the guard container's memory limit there,
// in MiB.
func deploymentMemoryLimitMiB() (float64, error) {
	q, err := deploymentLimit(corev1.ResourceMemory)
	return q.AsApproximateFloat64() / (1 << 20), err
}

func deploymentLimit(name corev1.ResourceName) (resource.Quantity, error) {
	root, err := harness.RepoRoot()
	if err != nil {
		return resource.Quantity{}, err
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy/kustomize/base/deployment.yaml"))
	if err != nil {
		return resource.Quantity{}, err
	}
	var d appsv1.Deployment
	if err := yaml.Unmarshal(data, &d); err != nil {
		return resource.Quantity{}, err
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if q, ok := c.Resources.Limits[name]; ok {
			return q, nil
		}
	}
	return resource.Quantity{}, fmt.Errorf("the Deployment sets no %s limit", name)
}
