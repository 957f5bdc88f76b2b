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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// The road is judged by whether it carried a connection (ClassifyPath):
// any answer the webhook's server gives, an HTTP status or a TLS error of
// its own, is Healthy. A dial that failed ("error trying to reach
// service") and no answer within the timeout, while kube-apiserver
// answers the guard, are Failed. What says nothing about the road (RBAC,
// kube-apiserver's own errors, the guard's own road to it, no endpoint
// the service proxy can use, a missing Service) is Unknown.
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
	if res.Outcome == OutcomeFailed && res.Reason == ReasonTimeout && res.HTTPStatus == 0 {
		// No answer at all: either kube-apiserver holds a CONNECT its
		// egress leaves unanswered (without a deadline of its own), or the
		// guard's own road to kube-apiserver is slow or broken. Only the
		// first says anything about the webhook's road.
		if legErr := p.answers(ctx); legErr != nil {
			return Result{Outcome: OutcomeUnknown, Duration: time.Since(start), Err: fmt.Errorf(
				"no answer from kube-apiserver's service proxy within %s, and kube-apiserver does not answer the guard either (%v): that says nothing about its road to the webhook", timeout, legErr)}
		}
		res.Err = fmt.Errorf("no answer from kube-apiserver's service proxy within %s, while kube-apiserver answers the guard's other requests", timeout)
		res.Duration = time.Since(start)
	}
	return res
}

// LegCheckTimeout is how long Probe waits for kube-apiserver to answer
// GET /version after a path probe got no answer at all.
const LegCheckTimeout = time.Second

// answers returns nil when kube-apiserver answers a GET /version (allowed
// to every authenticated user by system:public-info-viewer) within
// LegCheckTimeout: the guard's own road to it works.
func (p *PathProber) answers(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, LegCheckTimeout)
	defer cancel()
	return p.Client.Get().AbsPath("/version").Do(lctx).Error()
}

// ClassifyPath judges the road from the error of one service proxy GET to
// the Service named service (nil: an answer of 2xx), by whether the road
// carried a connection to the webhook's server:
//
//   - Healthy: a 2xx answer; any other answer relayed from the webhook's
//     server, whatever its status (404, 405, 500, even a 503 of its own:
//     client-go reports a body that is not a Status as an unexpected server
//     response); and kube-apiserver's 503 "error trying to reach service"
//     whose dial error is the backend's TLS or HTTP (a TLS alert such as
//     "certificate required" from a webhook demanding a client
//     certificate, a certificate kube-apiserver refused, an HTTP answer on
//     the HTTPS port): only the webhook's server speaks TLS on that
//     connection, since the egress tunnels it without terminating it.
//   - Failed: kube-apiserver's own 503 "error trying to reach service: …"
//     for any other dial error (refused, reset, a 502 of the egress, a dial
//     or TLS handshake timeout), with the reason read from its message; and
//     no answer at all (the client's deadline): timeout. Probe checks that
//     kube-apiserver answers the guard before it counts the latter.
//   - Unknown: what says nothing about the road: any Status kube-apiserver
//     generated itself (RBAC 401 and 403, 429, the Service not found, its
//     own 5xx), kube-apiserver's 503 "no endpoints available" or "no
//     service port" (the service proxy only dials a ready endpoint backed
//     by a Pod, which a webhook behind a selectorless Service does not
//     have, while kube-apiserver's webhook calls reach it through the
//     ClusterIP), and any error that is not an answer.
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
	const reach = "error trying to reach service: "
	switch {
	case relayed(status):
		// Relayed from the webhook's server: the road works.
		return Result{Outcome: OutcomeHealthy, HTTPStatus: code}
	case code == http.StatusServiceUnavailable && strings.Contains(msg, reach) && backendAnswered(msg[strings.Index(msg, reach)+len(reach):]):
		return Result{Outcome: OutcomeHealthy, HTTPStatus: code}
	case code == http.StatusServiceUnavailable && strings.Contains(msg, reach):
		return Result{Outcome: OutcomeFailed, Reason: pathReason(msg), HTTPStatus: code, Err: fmt.Errorf("kube-apiserver could not reach the webhook's server through its egress: %s", msg)}
	case code == http.StatusServiceUnavailable && (strings.Contains(msg, "no endpoints available for service") || strings.Contains(msg, "no service port")):
		return Result{Outcome: OutcomeUnknown, HTTPStatus: code, Err: fmt.Errorf("kube-apiserver's service proxy has nowhere to go (%s): it dials only a ready endpoint backed by a Pod, so it cannot tell whether the road works", msg)}
	case code == http.StatusForbidden && strings.Contains(msg, `"services/proxy"`):
		return Result{Outcome: OutcomeUnknown, HTTPStatus: code, Err: fmt.Errorf("the guard may not use kube-apiserver's service proxy (RBAC: get on services/proxy, resourceNames %s, in a Role in the Service's namespace: set apiserverSignal.pathProbe.service and render it with guard manifests rbac): %w",
			"https:"+service+":<port>", err)}
	}
	// A Status kube-apiserver made itself, before or instead of proxying.
	return Result{Outcome: OutcomeUnknown, HTTPStatus: code, Err: fmt.Errorf("kube-apiserver's service proxy: %w", err)}
}

// relayed reports whether status is client-go's account of an answer that
// was not a Status: a body kube-apiserver relayed from the webhook's server.
func relayed(status metav1.Status) bool {
	if status.Details == nil {
		return false
	}
	for _, c := range status.Details.Causes {
		if c.Type == metav1.CauseTypeUnexpectedServerResponse {
			return true
		}
	}
	return false
}

// backendAnswered reports whether dial, the error kube-apiserver's service
// proxy met on its connection to the webhook's server, came from that
// server speaking TLS or HTTP: the road carried the connection. A TLS
// handshake that timed out is silence, not an answer.
func backendAnswered(dial string) bool {
	d := strings.ToLower(dial)
	if strings.Contains(d, "timeout") || strings.Contains(d, "timed out") {
		return false
	}
	return strings.Contains(d, "tls:") || strings.Contains(d, "x509:") || strings.Contains(d, "http response to https client")
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
