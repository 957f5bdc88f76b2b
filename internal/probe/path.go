package probe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
)

// PathProber probes the road from kube-apiserver to a service-backed
// webhook, not the webhook: it GETs a path on the webhook's server through
// kube-apiserver's service proxy
// (/api/v1/namespaces/{ns}/services/https:{name}:{port}/proxy/{path}).
// kube-apiserver dials that request through the same "cluster" egress
// (konnectivity, an egress proxy) as its calls to service-backed webhooks
// (k8s.io/apiserver pkg/util/webhook/authentication.go), so a broken road
// breaks both. The request carries nothing a tenant chooses, so no
// tenant can make it fail.
//
// Any answer the webhook's server gives is Healthy: the road works. The
// apiserver's own "error trying to reach service" and no answer within
// the timeout are Failed. What says nothing about the road (RBAC, no
// endpoint the service proxy can use, a missing Service) is Unknown.
type PathProber struct {
	// Client is a REST client for the core API group (a clientset's
	// CoreV1().RESTClient()).
	Client rest.Interface
}

// PathTimeout is how long a path probe of wh waits for an answer: the
// webhook's timeoutSeconds (DefaultTimeout when unset), or spec.Timeout
// when it is shorter, as for the direct probe. kube-apiserver gives a
// CONNECT its egress leaves unanswered no deadline of its own, so this is
// the only one.
func PathTimeout(wh admissionregistrationv1.MutatingWebhook, spec Spec) time.Duration {
	return probeTimeout(wh, spec)
}

// ProxyName is the name kube-apiserver's service proxy, and its RBAC, see
// for an HTTPS request to svc: "https:<name>:<port>", the port defaulting
// to 443 as clientConfig.service's does.
func ProxyName(svc admissionregistrationv1.ServiceReference) string {
	port := int32(443)
	if svc.Port != nil {
		port = *svc.Port
	}
	return "https:" + svc.Name + ":" + strconv.Itoa(int(port))
}

// Probe GETs path on svc's server through kube-apiserver's service proxy,
// waiting at most timeout for an answer. It never returns an error: the
// Result says Healthy, Failed (with a reason) or Unknown.
func (p *PathProber) Probe(ctx context.Context, svc admissionregistrationv1.ServiceReference, path string, timeout time.Duration) Result {
	start := time.Now()
	if p.Client == nil {
		return Result{Outcome: OutcomeUnknown, Err: errors.New("no client for kube-apiserver's service proxy")}
	}
	if path == "" {
		path = "/"
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Do(ctx).Error() decodes the apiserver's own Status, in whatever
	// encoding was negotiated; a raw read would only say "the server is
	// currently unable to handle the request".
	err := p.Client.Get().Namespace(svc.Namespace).Resource("services").Name(ProxyName(svc)).
		SubResource("proxy").Suffix(path).Do(pctx).Error()
	res := ClassifyPath(err, svc.Name)
	res.Duration = time.Since(start)
	if res.Outcome == OutcomeFailed && res.Reason == ReasonTimeout && ctx.Err() != nil {
		// The guard itself is stopping; that says nothing about the road.
		res = Result{Outcome: OutcomeUnknown, Err: ctx.Err(), Duration: res.Duration}
	}
	if res.Outcome == OutcomeFailed && res.Reason == ReasonTimeout && res.Err != nil && errors.Is(err, context.DeadlineExceeded) {
		// No answer at all: kube-apiserver holds a CONNECT its egress
		// leaves unanswered without a deadline. The URL says nothing more.
		res.Err = fmt.Errorf("no answer from kube-apiserver's service proxy within %s", timeout)
	}
	return res
}

// ClassifyPath judges the road from the error of one service proxy GET to
// the Service named service (nil: an answer of 2xx):
//
//   - Healthy: a 2xx answer, or any other answer relayed from the
//     webhook's server (404, 405, 500, even a 503 of its own): the road
//     carried the request there and back.
//   - Failed: kube-apiserver's own 503 "error trying to reach service: …"
//     (the dial through the egress failed: refused, a 502 of the egress,
//     TLS, a timeout), with the reason read from its message; and no
//     answer at all (the client's deadline, a timeout): timeout.
//   - Unknown: what says nothing about the road: RBAC (401, 403 on
//     services/proxy), 429, kube-apiserver's own 503 "no endpoints
//     available" or "no service port" (the service proxy only dials a
//     ready endpoint backed by a Pod, which a webhook need not have), the
//     Service not found, and any error that is not an answer.
func ClassifyPath(err error, service string) Result {
	if err == nil {
		return Result{Outcome: OutcomeHealthy, HTTPStatus: http.StatusOK}
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		if isTimeout(err) {
			return Result{Outcome: OutcomeFailed, Reason: ReasonTimeout, Err: err}
		}
		return Result{Outcome: OutcomeUnknown, Err: fmt.Errorf("reaching kube-apiserver's service proxy: %w", err)}
	}
	status := st.Status()
	code, msg := int(status.Code), status.Message
	switch {
	case code == http.StatusServiceUnavailable && strings.Contains(msg, "error trying to reach service"):
		return Result{Outcome: OutcomeFailed, Reason: pathReason(msg), HTTPStatus: code, Err: fmt.Errorf("kube-apiserver could not reach the webhook's server through its egress: %s", msg)}
	case code == http.StatusServiceUnavailable && (strings.Contains(msg, "no endpoints available for service") || strings.Contains(msg, "no service port")):
		return Result{Outcome: OutcomeUnknown, HTTPStatus: code, Err: fmt.Errorf("kube-apiserver's service proxy has nowhere to go (%s): it dials only a ready endpoint backed by a Pod, so it cannot tell whether the road works", msg)}
	case code == http.StatusUnauthorized || code == http.StatusTooManyRequests || code == 0:
		return Result{Outcome: OutcomeUnknown, HTTPStatus: code, Err: fmt.Errorf("kube-apiserver's service proxy: %w", err)}
	case code == http.StatusForbidden && strings.Contains(msg, `"services/proxy"`):
		return Result{Outcome: OutcomeUnknown, HTTPStatus: code, Err: fmt.Errorf("the guard may not use kube-apiserver's service proxy (RBAC: get on services/proxy, resourceNames %s: set apiserverSignal.pathProbe.service and run make manifests): %w",
			"https:"+service+":<port>", err)}
	case code == http.StatusNotFound && msg == fmt.Sprintf("services %q not found", service):
		return Result{Outcome: OutcomeUnknown, HTTPStatus: code, Err: fmt.Errorf("kube-apiserver's service proxy: %w", err)}
	}
	// Relayed from the webhook's server: the road works.
	return Result{Outcome: OutcomeHealthy, HTTPStatus: code}
}

// pathReason reads the failure reason from kube-apiserver's "error trying
// to reach service: <dial error>".
func pathReason(msg string) FailureReason {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "connection refused"), strings.Contains(m, "connection reset"), strings.Contains(m, "eof"):
		return ReasonRefused
	case strings.Contains(m, "tls:"), strings.Contains(m, "x509:"), strings.Contains(m, "certificate"):
		return ReasonTLS
	case strings.Contains(m, "timeout"), strings.Contains(m, "deadline exceeded"), strings.Contains(m, "timed out"):
		return ReasonTimeout
	}
	return ReasonNoRoute
}
