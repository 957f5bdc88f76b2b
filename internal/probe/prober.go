package probe

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// maxResponseBytes bounds how much of a response body is read; a longer
// AdmissionReview answer is a bad-response. The answer to a probe of one
// small object is a few kilobytes; the bound keeps many hostile targets
// from filling the guard's memory.
const maxResponseBytes = 1 << 20

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
	// Mapper gives an AdmissionReview probe the kind and scope of the
	// resource it pretends to create, as discovery serves them (the
	// manager's RESTMapper). Required for AdmissionReview probes; without
	// it they are Unknown.
	Mapper meta.RESTMapper
	// SystemRoots, when non-nil, replaces the system roots used to verify
	// webhooks with an empty caBundle (for tests). Nil means the real
	// system roots.
	SystemRoots *x509.CertPool
	// Stalls, when set, tells how long the guard itself did not run
	// during a probe (a StallMonitor). A probe that timed out while the
	// guard was stalled for a tenth of its timeout or more is Unknown,
	// not a webhook timeout: an overloaded or throttled guard must never
	// open healthy webhooks.
	Stalls interface {
		Stalled(from, to time.Time) time.Duration
	}
	// Pool, when set, keeps connections between probes (see
	// ConnectionPool). Nil opens a fresh connection for every probe.
	Pool *ConnectionPool

	// roots caches parsed caBundles by rootsKey, and kinds the RESTMapper's
	// answers by resource: parsing and mapping on every probe were a
	// visible part of the guard's CPU at a thousand targets.
	roots sync.Map // [32]byte -> *x509.CertPool
	kinds sync.Map // schema.GroupVersionResource -> cachedTarget
	// bodies caches encoded AdmissionReviews by bodyKey.
	bodies sync.Map

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

// stallShare is the share of a probe's timeout the guard may be stalled
// before a timeout counts for nothing.
const stallShare = 10

// endpoint is where and how to reach a webhook.
type endpoint struct {
	url        *url.URL
	serverName string
	roots      *x509.CertPool // nil = system roots
	rootsKey   [32]byte
	pool       *ConnectionPool
}

// Probe sends one probe to wh as described by spec and classifies the
// outcome. It always returns a Result with Duration set.
func (p *Prober) Probe(ctx context.Context, wh admissionregistrationv1.MutatingWebhook, spec Spec) (res Result) {
	start := time.Now()
	defer func() {
		end := time.Now()
		res.Duration = end.Sub(start)
		if f, ok := p.Resolver.(interface{ Forget(namespace, name string) }); ok && res.Outcome == OutcomeFailed && wh.ClientConfig.Service != nil {
			// The Service may have changed: read it again next time.
			f.Forget(wh.ClientConfig.Service.Namespace, wh.ClientConfig.Service.Name)
		}
		if res.Outcome == OutcomeFailed && res.Reason == ReasonTimeout && p.Stalls != nil {
			if stalled := p.Stalls.Stalled(start, end); stalled >= probeTimeout(wh, spec)/stallShare {
				res = Result{Outcome: OutcomeUnknown, Duration: res.Duration, Err: fmt.Errorf(
					"timed out while webhook-guard itself did not run for %s of the probe's %s (CPU throttling or starvation of the guard, not the webhook): %w",
					stalled.Round(time.Millisecond), res.Duration.Round(time.Millisecond), res.Err)}
			}
		}
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

	ep, res, ok := p.endpoint(ctx, probeCtx, wh.ClientConfig)
	if !ok {
		return res
	}
	ep.pool = p.Pool

	if kind == KindHTTPGet {
		return p.httpGet(ctx, probeCtx, ep, spec.Path)
	}
	return p.admissionReview(ctx, probeCtx, ep, wh, timeout, !spec.Validating)
}

// probeTimeout is the webhook's timeoutSeconds (DefaultTimeout when
// unset), or spec.Timeout when it is shorter: kube-apiserver gives up after
// timeoutSeconds, so a probe that waits longer would call healthy a
// webhook whose calls fail.
func probeTimeout(wh admissionregistrationv1.MutatingWebhook, spec Spec) time.Duration {
	limit := DefaultTimeout
	if wh.TimeoutSeconds != nil && *wh.TimeoutSeconds > 0 {
		limit = time.Duration(*wh.TimeoutSeconds) * time.Second
	}
	if spec.Timeout > 0 && spec.Timeout < limit {
		return spec.Timeout
	}
	return limit
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
	} else {
		ep.roots = p.SystemRoots
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
		DialContext: (&net.Dialer{KeepAlive: -1}).DialContext,
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

func (p *Prober) admissionReview(ctx, probeCtx context.Context, ep endpoint, wh admissionregistrationv1.MutatingWebhook, timeout time.Duration, mutating bool) Result {
	username := p.Username
	if username == "" {
		username = circuit.DefaultUsername
	}
	target, err := targetFor(wh, p.Mapper, &p.kinds)
	if err != nil {
		return unknown(err)
	}
	body, uid, err := p.reviewBody(target, username)
	if err != nil {
		return unknown(err)
	}

	u := *ep.url
	// kube-apiserver's REST client adds the call timeout as a query parameter.
	q := u.Query()
	q.Set("timeout", timeout.String())
	u.RawQuery = q.Encode()

	req, err := http.NewRequestWithContext(probeCtx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return failed(ReasonNoRoute, fmt.Errorf("%w: building request: %v", ErrNoRoute, err), 0)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, */*")

	status, respBody, err := ep.do(req, true)
	if err != nil {
		return p.callFailed(ctx, err, status)
	}
	if err := verifyAdmissionResponse(uid, mutating, respBody); err != nil {
		return failed(ReasonBadResponse, err, status)
	}
	return Result{Outcome: OutcomeHealthy, HTTPStatus: status}
}

// reviewBody returns the encoded AdmissionReview for target, with a fresh
// request UID. The encoding is the same for every probe of a resource but
// for the UID, so it is made once (an encoding per probe was a visible
// part of the guard's CPU) and the UID put in its place.
func (p *Prober) reviewBody(target probeTarget, username string) ([]byte, types.UID, error) {
	key := bodyKey{target, username}
	tmpl, ok := p.bodies.Load(key)
	if !ok {
		review, err := newAdmissionReview(target, username)
		if err != nil {
			return nil, "", fmt.Errorf("building AdmissionReview: %w", err)
		}
		review.Request.UID = placeholderUID
		data, err := json.Marshal(review)
		if err != nil {
			return nil, "", fmt.Errorf("encoding AdmissionReview: %w", err)
		}
		if bytes.Count(data, []byte(placeholderUID)) != 1 {
			return nil, "", fmt.Errorf("encoding AdmissionReview: the request UID is not unique in it")
		}
		tmpl, _ = p.bodies.LoadOrStore(key, data)
	}
	uid := uuid.NewUUID()
	return bytes.Replace(tmpl.([]byte), []byte(placeholderUID), []byte(uid), 1), uid, nil
}

// placeholderUID stands for the request UID in a cached AdmissionReview;
// a real UID has the same length.
const placeholderUID = "00000000-0000-0000-0000-000000000000"

type bodyKey struct {
	target   probeTarget
	username string
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
	status, _, err := ep.do(req, false)
	if err != nil {
		return p.callFailed(ctx, err, status)
	}
	return Result{Outcome: OutcomeHealthy, HTTPStatus: status}
}

// do sends req, over a fresh connection or, with a pool, a kept-alive
// one. For AdmissionReview calls (wantBody) only 200 is acceptable and the
// body is returned; otherwise any 2xx is. status is 0 when no response
// arrived.
func (ep endpoint) do(req *http.Request, wantBody bool) (status int, body []byte, err error) {
	var resp *http.Response
	if ep.pool == nil {
		c, tr := ep.client()
		defer tr.CloseIdleConnections()
		resp, err = c.Do(req)
	} else {
		resp, err = ep.doPooled(req)
	}
	if err != nil {
		return 0, nil, err
	}
	defer func() {
		// Drain a little so that the connection can be kept.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}()
	status = resp.StatusCode

	if !wantBody {
		if status < 200 || status > 299 {
			return status, nil, &httpStatusError{code: status}
		}
		return status, nil, nil
	}
	if status != http.StatusOK {
		return status, nil, &httpStatusError{code: status}
	}
	// kube-apiserver decodes the answer by its content type; it cannot
	// read anything but JSON from a webhook.
	if ct, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		return status, nil, badResponsef("Content-Type %q is not application/json", resp.Header.Get("Content-Type"))
	}
	body, err = io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return status, nil, fmt.Errorf("reading response body: %w", err)
	}
	if len(body) > maxResponseBytes {
		return status, nil, badResponsef("body exceeds %d bytes", maxResponseBytes)
	}
	return status, body, nil
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

// callFailed classifies a call error; if the caller's own context ended,
// the result is Unknown rather than a failure of the webhook.
func (p *Prober) callFailed(ctx context.Context, err error, status int) Result {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return Result{Outcome: OutcomeUnknown, Err: fmt.Errorf("probe abandoned: %w", ctxErr), HTTPStatus: status}
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
