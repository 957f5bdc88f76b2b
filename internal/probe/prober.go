package probe

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"golang.org/x/net/idna"
	"golang.org/x/time/rate"
	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	webhookutil "k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// defaultServicePort is the port of a service reference whose port is nil.
const defaultServicePort int32 = 443

// Prober sends probes to webhooks. The zero value is usable for url
// references; service references need a Resolver. A Prober is safe for
// concurrent use; with a Pool it keeps connections between probes,
// without one it opens a fresh connection for every probe.
type Prober struct {
	// Resolver resolves service references to host:port. Required for
	// webhooks using clientConfig.service; nil makes such probes Unknown.
	Resolver Resolver
	// Username is request.userInfo.username in AdmissionReview probes;
	// empty means circuit.DefaultUsername.
	Username string
	// Discovery tells an AdmissionReview probe which resources
	// kube-apiserver serves, so that it pretends to create one that the
	// webhook's rules match (a discovery client; the answer is cached).
	// Required for AdmissionReview probes; without it they are Unknown.
	Discovery Discovery
	// SystemRootsPEM, when set, replaces the system roots used to verify
	// webhooks with an empty caBundle (for tests). Empty means the real
	// system roots.
	SystemRootsPEM []byte
	// Stalls, when set, tells how long the guard itself did not run
	// during a probe (a StallMonitor). A probe that timed out while the
	// guard was stalled at its deadline (stalledAtDeadline) is Unknown,
	// not a webhook timeout: an overloaded or throttled guard must never
	// open healthy webhooks.
	Stalls Stalls
	// Pool, when set, keeps connections between probes (see
	// ConnectionPool). Nil opens a fresh connection for every probe.
	Pool *ConnectionPool
	// RecoveryDials, when set, bounds the new connections that recovery
	// probes (Spec.Recovery: of open circuits, and after an Unknown) open
	// a second. A probe of a hanging webhook loses its connection at its
	// timeout, so without a bound the open circuits of a mass failure
	// cost the guard a TCP and TLS handshake each every few seconds, which
	// starved it at a thousand targets. Other probes, which may have to
	// open a circuit, and probes on kept-alive connections take no token.
	RecoveryDials *rate.Limiter

	// netDial opens a connection to the address dial computed; nil means
	// KeepAliveDialer. Tests put a name resolver of their own here.
	netDial dialFunc

	// roots caches parsed caBundles by rootsKey: parsing on every probe
	// was a visible part of the guard's CPU at a thousand targets.
	roots sync.Map // [32]byte -> *x509.CertPool
	// bodies caches encoded AdmissionReviews by bodyKey.
	bodies sync.Map // bodyKey -> bodyTemplate
	// catalog caches discovery's answer.
	catalog catalog
	// hooks are kube-apiserver's webhook clients, one per clientConfig.
	hooks hookClients

	rootsCount atomic.Int64
}

// maxCachedRoots bounds the caBundle cache; it is emptied when full (CA
// rotations leave old entries behind).
const maxCachedRoots = 4096

// rootsFor returns the pool of caBundle, whose rootsKey is key; false when
// it holds no certificate.
func (p *Prober) rootsFor(key [32]byte, caBundle []byte) (*x509.CertPool, bool) {
	if pool, ok := p.roots.Load(key); ok {
		return pool.(*x509.CertPool), true
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caBundle) {
		return nil, false
	}
	if p.rootsCount.Add(1) > maxCachedRoots {
		p.roots.Clear()
		p.rootsCount.Store(1)
	}
	p.roots.Store(key, pool)
	return pool, true
}

// Stalls tells how long the guard itself did not run between two times
// (a StallMonitor).
type Stalls interface {
	Stalled(from, to time.Time) time.Duration
}

// stallShare sets the window before a probe's deadline in which a stall
// of the guard can have turned an answer into a timeout: the last
// 1/stallShare of the timeout.
const stallShare = 10

// stalledAtDeadline reports whether the guard itself was not running
// when a probe's timeout fired: stalled for at least half of the last
// 1/stallShare of the timeout. Only such a stall can turn an answer into
// a timeout: an answer that arrives during a stall earlier in the probe is
// read as soon as the guard runs again, before the deadline. Counting
// every stall in the probe instead, or the stalls after the deadline
// while the probe returns, discounted nearly every timeout of a guard at
// its CPU limit, where the CFS quota stops it for tens of milliseconds in
// many 100 ms periods: a thousand hanging webhooks did not all open in
// two minutes (hack/bench, the mass failure with every default).
func stalledAtDeadline(stalls Stalls, deadline time.Time, timeout time.Duration) (time.Duration, bool) {
	window := timeout / stallShare
	stalled := stalls.Stalled(deadline.Add(-window), deadline)
	return stalled, stalled >= window/2
}

// endpoint is where and how to reach a webhook.
type endpoint struct {
	url        *url.URL
	serverName string
	roots      *x509.CertPool // nil = system roots
	rootsKey   [32]byte
	pool       *ConnectionPool
	// dial opens the endpoint's connections.
	dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// Probe sends one probe to wh as described by spec and classifies the
// outcome. It always returns a Result with Duration set.
func (p *Prober) Probe(ctx context.Context, wh admissionregistrationv1.MutatingWebhook, spec Spec) (res Result) {
	start := time.Now()
	defer func() {
		end := time.Now()
		res.Duration = end.Sub(start)
		timeout := probeTimeout(wh, spec)
		if res.Outcome == OutcomeFailed && res.Reason == ReasonTimeout && p.Stalls != nil {
			if stalled, ok := stalledAtDeadline(p.Stalls, start.Add(timeout), timeout); ok {
				res = Result{Outcome: OutcomeUnknown, Duration: res.Duration, Err: fmt.Errorf(
					"timed out while webhook-guard itself did not run for %s before the probe's deadline, %s after it was sent (CPU throttling or starvation of the guard, not the webhook): %w",
					stalled.Round(time.Millisecond), timeout, res.Err)}
			}
		}
		res.Slow = res.Outcome == OutcomeFailed && res.Reason == ReasonTimeout && timeout < webhookTimeout(wh)
	}()

	kind := spec.Kind
	if kind == "" {
		kind = KindAdmissionReview
	}
	switch kind {
	case KindAdmissionReview:
		if err := AdmissionReviewProbeable(wh); err != nil {
			return unknown(err)
		}
	case KindHTTPGet:
		if !strings.HasPrefix(spec.Path, "/") {
			return unknown(fmt.Errorf("HTTPGet probe needs an absolute path, got %q", spec.Path))
		}
	default:
		return unknown(fmt.Errorf("unsupported probe kind %q", kind))
	}
	if spec.Timeout < 0 {
		return unknown(fmt.Errorf("negative probe timeout %s", spec.Timeout))
	}

	timeout := probeTimeout(wh, spec)
	probeCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// The endpoint is resolved first for both kinds: a Service the guard
	// cannot read is Unknown, one that does not exist a no-route failure,
	// and an unusable caBundle a tls failure, before any call.
	ep, res, ok := p.endpoint(ctx, probeCtx, wh.ClientConfig)
	if !ok {
		return res
	}
	ep.pool = p.Pool

	ep.dial = p.dial()
	if wh.ClientConfig.URL != nil {
		probeCtx = context.WithValue(probeCtx, urlHostKey{}, asciiHost(ep.url.Hostname()))
	}
	if spec.Recovery {
		ctx = context.WithValue(ctx, recoveryKey{}, true)
		probeCtx = context.WithValue(probeCtx, recoveryKey{}, true)
	}

	if kind == KindHTTPGet {
		return p.httpGet(ctx, probeCtx, ep, spec.Path)
	}
	// The review tells the webhook kube-apiserver's own deadline, while
	// the probe gives up at its own timeout, which may be shorter.
	return p.admissionReview(ctx, probeCtx, wh, webhookTimeout(wh), !spec.Validating)
}

// probeTimeout is spec.Timeout, or DefaultSlowCall when it is zero, but
// never longer than the webhook's timeoutSeconds (DefaultTimeout when
// unset): kube-apiserver gives up after timeoutSeconds, so a probe that
// waits longer would call healthy a webhook whose calls fail.
func probeTimeout(wh admissionregistrationv1.MutatingWebhook, spec Spec) time.Duration {
	limit := webhookTimeout(wh)
	want := spec.Timeout
	if want <= 0 {
		want = DefaultSlowCall
	}
	return min(want, limit)
}

// webhookTimeout is how long kube-apiserver waits for wh: its
// timeoutSeconds, DefaultTimeout when unset.
func webhookTimeout(wh admissionregistrationv1.MutatingWebhook) time.Duration {
	if wh.TimeoutSeconds != nil && *wh.TimeoutSeconds > 0 {
		return time.Duration(*wh.TimeoutSeconds) * time.Second
	}
	return DefaultTimeout
}

// endpoint turns clientConfig into a URL, TLS server name and roots, like
// kube-apiserver's webhook client does. ok is false when res is final.
func (p *Prober) endpoint(ctx, probeCtx context.Context, cc admissionregistrationv1.WebhookClientConfig) (ep endpoint, res Result, ok bool) {
	switch {
	case cc.URL != nil && cc.Service != nil:
		return ep, unknown(errors.New("clientConfig sets both url and service")), false
	case cc.URL != nil:
		// The URL is used as given; the TLS server name is its host.
		u, err := url.Parse(*cc.URL)
		if err != nil || u.Host == "" {
			// kube-apiserver cannot call an unusable URL either.
			return ep, failed(ReasonNoRoute, fmt.Errorf("%w: clientConfig.url is not a usable URL", ErrNoRoute), 0), false
		}
		ep.url = u
		ep.serverName = u.Hostname()
	case cc.Service != nil:
		svc := cc.Service
		if p.Resolver == nil {
			return ep, unknown(errors.New("webhook uses a service reference but the prober has no Resolver")), false
		}
		port := defaultServicePort
		if svc.Port != nil {
			port = *svc.Port
		}
		hostPort, err := p.Resolver.Resolve(probeCtx, svc.Namespace, svc.Name, port)
		if err != nil {
			if errors.Is(err, ErrNoRoute) && ctx.Err() == nil {
				return ep, failed(ReasonNoRoute, err, 0), false
			}
			// The guard's own lookup failed: that says nothing about the webhook.
			return ep, unknown(fmt.Errorf("resolving service %s/%s: %w", svc.Namespace, svc.Name, err)), false
		}
		path := ""
		if svc.Path != nil {
			path = *svc.Path
		}
		ep.url = &url.URL{Scheme: "https", Host: hostPort, Path: path}
		ep.serverName = svc.Name + "." + svc.Namespace + ".svc"
	default:
		return ep, unknown(errors.New("clientConfig sets neither url nor service")), false
	}

	ep.rootsKey = rootsKeyOf(cc.CABundle)
	if len(cc.CABundle) > 0 {
		pool, ok := p.rootsFor(ep.rootsKey, cc.CABundle)
		if !ok {
			return ep, failed(ReasonTLS, errBadCABundle, 0), false
		}
		ep.roots = pool
	} else if len(p.SystemRootsPEM) > 0 {
		pool, ok := p.rootsFor(rootsKeyOf(p.SystemRootsPEM), p.SystemRootsPEM)
		if !ok {
			return ep, unknown(errors.New("SystemRootsPEM holds no certificate")), false
		}
		ep.roots = pool
	}
	return ep, Result{}, true
}

// client returns an HTTP client that opens one fresh connection per request
// (keep-alives off, so a dead server cannot hide behind a cached
// connection), uses no proxy, and does not follow redirects (a 3xx is an
// http-status failure).
func (ep endpoint) client() (*http.Client, *http.Transport) {
	tr := &http.Transport{
		Proxy:       nil,
		DialContext: ep.dial,
		TLSClientConfig: &tls.Config{
			RootCAs:    ep.roots,
			ServerName: ep.serverName,
			MinVersion: tls.VersionTLS12,
		},
		DisableKeepAlives:      true,
		ForceAttemptHTTP2:      true, // kube-apiserver talks HTTP/2 to webhooks when offered
		MaxResponseHeaderBytes: 1 << 20,
	}
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, tr
}

func (p *Prober) admissionReview(ctx, probeCtx context.Context, wh admissionregistrationv1.MutatingWebhook, timeout time.Duration, mutating bool) Result {
	username := p.Username
	if username == "" {
		username = circuit.DefaultUsername
	}
	target, err := targetFor(wh, p.Discovery, &p.catalog)
	if err != nil {
		return unknown(err)
	}
	body, uid, response, err := p.reviewBody(&wh, target, username)
	if err != nil {
		return unknown(err)
	}
	c, err := p.hookClient(wh.ClientConfig)
	if err != nil {
		// kube-apiserver cannot build a client for this clientConfig either
		// ("could not get REST client", a calling error).
		return failed(Classify(err), err, 0)
	}

	// kube-apiserver passes the review as a runtime.Object, for which
	// client-go sets Content-Type (Request.Body); for the cached bytes it
	// sets none, so the probe sets the same one.
	req := c.Post().SetHeader("Content-Type", runtime.ContentTypeJSON).Body(body)
	// kube-apiserver tells the webhook its deadline, in whole seconds
	// rounded up.
	if t := timeout.Truncate(time.Second); t != timeout {
		req.Timeout(t + time.Second)
	} else {
		req.Timeout(timeout)
	}
	// client-go logs what it cannot read through the context's logger; the
	// probe reports it in its Result instead.
	result := req.Do(klog.NewContext(probeCtx, logr.Discard()))
	var status int
	result.StatusCode(&status)
	if err := result.Error(); err != nil {
		var statusErr *apierrors.StatusError
		switch {
		case status != 0:
			// A response whose status client-go does not accept (outside
			// 200-206, transformResponse): a *StatusError, not a network error.
			return failed(ReasonHTTPStatus, fmt.Errorf("%w: %v", &httpStatusError{code: status}, err), status)
		case errors.As(err, &statusErr):
			// A response client-go could not read (an unparsable
			// Content-Type, transformResponse).
			return failed(ReasonBadResponse, badResponsef("%v", err), status)
		}
		return p.callFailed(ctx, err, status)
	}
	if err := result.Into(response); err != nil {
		return failed(ReasonBadResponse, badResponsef("%v", err), status)
	}
	if err := verifyAdmissionResponse(uid, mutating, response); err != nil {
		return failed(ReasonBadResponse, err, status)
	}
	return Result{Outcome: OutcomeHealthy, HTTPStatus: status}
}

// hookClient returns kube-apiserver's REST client for cc. A webhook with
// an empty caBundle is verified against SystemRoots when that is set.
func (p *Prober) hookClient(cc admissionregistrationv1.WebhookClientConfig) (*rest.RESTClient, error) {
	hc := webhookutil.ClientConfig{CABundle: cc.CABundle}
	if len(hc.CABundle) == 0 {
		hc.CABundle = p.SystemRootsPEM
	}
	switch {
	case cc.URL != nil:
		hc.URL = *cc.URL
	case cc.Service != nil:
		hc.Service = &webhookutil.ClientConfigService{Name: cc.Service.Name, Namespace: cc.Service.Namespace, Port: defaultServicePort}
		if cc.Service.Port != nil {
			hc.Service.Port = *cc.Service.Port
		}
		if cc.Service.Path != nil {
			hc.Service.Path = *cc.Service.Path
		}
	}
	return p.hooks.client(hc, p.resolve, p.dial())
}

// resolve resolves a service reference for kube-apiserver's client.
func (p *Prober) resolve(ctx context.Context, namespace, name string, port int32) (string, error) {
	if p.Resolver == nil {
		return "", errors.New("webhook uses a service reference but the prober has no Resolver")
	}
	return p.Resolver.Resolve(ctx, namespace, name, port)
}

// reviewBody returns the encoded AdmissionReview for target, with a fresh
// request UID, and the empty review to decode the answer into. The
// encoding is the same for every probe of a webhook but for the UID, so it
// is made once (an encoding per probe was a visible part of the guard's
// CPU) and the UID put in its place.
func (p *Prober) reviewBody(wh *admissionregistrationv1.MutatingWebhook, target probeTarget, username string) ([]byte, types.UID, runtime.Object, error) {
	key := bodyKey{target: target, username: username, versions: strings.Join(wh.AdmissionReviewVersions, ",")}
	if tmpl, ok := p.bodies.Load(key); ok {
		t := tmpl.(bodyTemplate)
		uid := uuid.NewUUID()
		return bytes.Replace(t.data, []byte(placeholderUID), []byte(uid), 1), uid, t.newResponse(), nil
	}
	if err := p.hooks.init(p.resolve, p.dial()); err != nil {
		return nil, "", nil, err
	}
	uid, req, response, err := newAdmissionRequest(wh, target, username)
	if err != nil {
		return nil, "", nil, fmt.Errorf("building AdmissionReview: %w", err)
	}
	data, err := runtime.Encode(p.hooks.codec, req)
	if err != nil {
		return nil, "", nil, fmt.Errorf("encoding AdmissionReview: %w", err)
	}
	if bytes.Count(data, []byte(uid)) != 1 {
		return nil, "", nil, fmt.Errorf("encoding AdmissionReview: the request UID is not unique in it")
	}
	t := bodyTemplate{data: bytes.Replace(data, []byte(uid), []byte(placeholderUID), 1), newResponse: emptyLike(response)}
	p.bodies.Store(key, t)
	return data, uid, response, nil
}

// bodyTemplate is an encoded AdmissionReview with placeholderUID for its
// UID, and a constructor of the review its answer is decoded into.
type bodyTemplate struct {
	data        []byte
	newResponse func() runtime.Object
}

// emptyLike returns a constructor of empty objects of obj's type.
func emptyLike(obj runtime.Object) func() runtime.Object {
	switch obj.(type) {
	case *admissionv1beta1.AdmissionReview:
		return func() runtime.Object { return &admissionv1beta1.AdmissionReview{} }
	default:
		return func() runtime.Object { return &admissionv1.AdmissionReview{} }
	}
}

// placeholderUID stands for the request UID in a cached AdmissionReview;
// a real UID has the same length.
const placeholderUID = "00000000-0000-0000-0000-000000000000"

type bodyKey struct {
	target   probeTarget
	username string
	versions string
}

func (p *Prober) httpGet(ctx, probeCtx context.Context, ep endpoint, path string) Result {
	ref, err := url.Parse(path)
	if err != nil {
		return unknown(fmt.Errorf("HTTPGet probe path %q: %w", path, err))
	}
	u := *ep.url
	u.Path, u.RawPath, u.RawQuery = ref.Path, ref.RawPath, ref.RawQuery

	req, err := http.NewRequestWithContext(probeCtx, http.MethodGet, u.String(), nil)
	if err != nil {
		return failed(ReasonNoRoute, fmt.Errorf("%w: building request: %v", ErrNoRoute, err), 0)
	}
	status, err := ep.do(req)
	if err != nil {
		return p.callFailed(ctx, err, status)
	}
	return Result{Outcome: OutcomeHealthy, HTTPStatus: status}
}

// do sends an HTTPGet probe's req, over a fresh connection or, with a
// pool, a kept-alive one. Any 2xx status is healthy. status is 0 when no
// response arrived.
func (ep endpoint) do(req *http.Request) (status int, err error) {
	var resp *http.Response
	if ep.pool == nil {
		c, tr := ep.client()
		defer tr.CloseIdleConnections()
		resp, err = c.Do(req)
	} else {
		resp, err = ep.doPooled(req)
	}
	if err != nil {
		return 0, err
	}
	defer func() {
		// Drain a little so that the connection can be kept.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}()
	status = resp.StatusCode
	if status < 200 || status > 299 {
		return status, &httpStatusError{code: status}
	}
	return status, nil
}

// doPooled sends req on the pool's connection for ep. If that connection
// was a kept-alive one and failed before any answer (the server closed or
// reset it, as a restarted or dead server does), it sends req once more on
// a fresh connection within the same deadline: only that answer counts.
func (ep endpoint) doPooled(req *http.Request) (*http.Response, error) {
	tr := ep.pool.transport(ep, ep.rootsKey)
	c := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	reused := false
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused }}
	resp, err := c.Do(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	if err == nil || !reused || req.Context().Err() != nil {
		return resp, err
	}
	tr.CloseIdleConnections()
	retry := req.Clone(req.Context())
	if req.GetBody != nil {
		body, gerr := req.GetBody()
		if gerr != nil {
			return nil, err
		}
		retry.Body = body
	}
	return c.Do(retry)
}

// recoveryKey marks the context of a recovery probe (Spec.Recovery); the
// transport passes a request's context values on to its dial.
type recoveryKey struct{}

// KeepAliveDialer dials the probes' connections, as client-go's default
// dialer does for kube-apiserver's webhook clients. Its timeout matters:
// net/http lets a dial outlive the request that started it.
var KeepAliveDialer = &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}

// urlHostKey carries a url webhook's host, as net/http dials it
// (asciiHost), in the context of its probe: the transport passes a
// request's context values on to its dial.
type urlHostKey struct{}

// dial is KeepAliveDialer's DialContext of dialAddress, except that a
// recovery probe's dial first takes a token of RecoveryDials, and fails
// with ErrRecoveryDialBudget, without waiting, when there is none.
func (p *Prober) dial() dialFunc {
	netDial := p.netDial
	if netDial == nil {
		netDial = KeepAliveDialer.DialContext
	}
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		if p.RecoveryDials != nil && ctx.Value(recoveryKey{}) != nil && !p.RecoveryDials.Allow() {
			return nil, ErrRecoveryDialBudget
		}
		urlHost, _ := ctx.Value(urlHostKey{}).(string)
		return netDial(ctx, network, dialAddress(address, urlHost))
	}
}

// dialAddress is address with its host written as an absolute DNS name
// (a trailing dot) when that host is urlHost, the url webhook's own.
// kube-apiserver resolves that host with its node's resolver, which knows
// no cluster search path; the guard's pod tries its search domains first
// (ndots 5), where the host a.b is a.b.<namespace>.svc.cluster.local,
// then a.b.svc.cluster.local: the Service "a" of whoever may create the
// namespace "b", which would fail the probes of a healthy webhook. An IP
// literal and a name that is absolute already stay as they are, and so
// does any other host, such as a proxy's (HTTPS_PROXY), which the
// operator names as the pod resolves it, or the other host of a
// redirect. Only the dial sees the dot: the TLS server name and the Host
// header are the URL's.
func dialAddress(address, urlHost string) string {
	host, port, err := net.SplitHostPort(address)
	if err != nil || host == "" || host != urlHost || strings.HasSuffix(host, ".") {
		return address
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return address
	}
	return net.JoinHostPort(host+".", port)
}

// asciiHost is host as net/http dials it: an internationalised name in
// its ASCII (punycode) form, whose labels a tenant's namespace and
// Service can be named as well.
func asciiHost(host string) string {
	for i := range len(host) {
		if host[i] >= utf8.RuneSelf {
			if ascii, err := idna.Lookup.ToASCII(host); err == nil {
				return ascii
			}
			return host
		}
	}
	return host
}

// callFailed classifies a call error; if the caller's own context ended,
// the result is Unknown rather than a failure of the webhook, as it is
// when the probe was not sent for the recovery dial budget.
func (p *Prober) callFailed(ctx context.Context, err error, status int) Result {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return Result{Outcome: OutcomeUnknown, Err: fmt.Errorf("probe abandoned: %w", ctxErr), HTTPStatus: status}
	}
	if errors.Is(err, ErrRecoveryDialBudget) {
		return unknown(ErrRecoveryDialBudget)
	}
	return failed(Classify(err), err, status)
}

func failed(reason FailureReason, err error, status int) Result {
	return Result{Outcome: OutcomeFailed, Reason: reason, Err: err, HTTPStatus: status}
}

func unknown(err error) Result {
	return Result{Outcome: OutcomeUnknown, Err: err}
}

func sideEffectsString(s *admissionregistrationv1.SideEffectClass) string {
	if s == nil {
		return "<unset>"
	}
	return strconv.Quote(string(*s))
}
