package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

func TestClassifyPath(t *testing.T) {
	services := schema.GroupResource{Resource: "services"}
	reach := func(dial string) error {
		return apierrors.NewServiceUnavailable("error trying to reach service: " + dial)
	}
	relayed := func(code int) error {
		// What client-go makes of a relayed answer that is not a Status.
		return apierrors.NewGenericServerResponse(code, "get", services, "https:hook:443", "ok", 0, true)
	}
	cases := map[string]struct {
		err     error
		outcome Outcome
		reason  FailureReason
	}{
		"a 2xx answer: the road works":                                  {nil, OutcomeHealthy, ""},
		"a relayed 404 of the webhook's server: the road works":         {relayed(http.StatusNotFound), OutcomeHealthy, ""},
		"a relayed 405 of the webhook's server: the road works":         {relayed(http.StatusMethodNotAllowed), OutcomeHealthy, ""},
		"a relayed 500 of the webhook's server: the road works":         {relayed(http.StatusInternalServerError), OutcomeHealthy, ""},
		"a relayed 503 of the webhook's server: the road works":         {relayed(http.StatusServiceUnavailable), OutcomeHealthy, ""},
		"the egress refused the CONNECT (its 502)":                      {reach("proxy error from /tmp/wg-egress-1/proxy.sock while dialing 10.255.0.3:8443, code 502: 502 Bad Gateway"), OutcomeFailed, ReasonNoRoute},
		"the dial was refused":                                          {reach("dial tcp 10.1.2.3:8443: connect: connection refused"), OutcomeFailed, ReasonRefused},
		"the dial timed out":                                            {reach("dial tcp 10.1.2.3:8443: i/o timeout"), OutcomeFailed, ReasonTimeout},
		"the backend's TLS alert: the road carried the handshake":       {reach("remote error: tls: handshake failure"), OutcomeHealthy, ""},
		"a webhook demanding a client certificate: the road works":      {reach("readLoopPeekFailLocked: remote error: tls: certificate required"), OutcomeHealthy, ""},
		"a certificate kube-apiserver refused: the road works":          {reach("tls: failed to verify certificate: x509: certificate signed by unknown authority"), OutcomeHealthy, ""},
		"an HTTP answer on the HTTPS port: the road works":              {reach("http: server gave HTTP response to HTTPS client"), OutcomeHealthy, ""},
		"a TLS handshake with no answer: silence":                       {reach("net/http: TLS handshake timeout"), OutcomeFailed, ReasonTimeout},
		"the egress dropped the tunnel":                                 {reach("EOF"), OutcomeFailed, ReasonRefused},
		"no route to the endpoint":                                      {reach("dial tcp 10.1.2.3:8443: connect: no route to host"), OutcomeFailed, ReasonNoRoute},
		"kube-apiserver's own 500 says nothing":                         {apierrors.NewInternalError(errors.New("etcd is slow")), OutcomeUnknown, ""},
		"kube-apiserver's own 503 before proxying says nothing":         {apierrors.NewServiceUnavailable("the server is currently unable to handle the request"), OutcomeUnknown, ""},
		"kube-apiserver's own 504 says nothing":                         {apierrors.NewTimeoutError("request did not complete within requested timeout", 0), OutcomeUnknown, ""},
		"kube-apiserver's own 400 says nothing":                         {apierrors.NewBadRequest("invalid name"), OutcomeUnknown, ""},
		"a relayed 401 of the webhook's server: the road works":         {relayed(http.StatusUnauthorized), OutcomeHealthy, ""},
		"a relayed 429 of the webhook's server: the road works":         {relayed(http.StatusTooManyRequests), OutcomeHealthy, ""},
		"no answer at all: the client's own deadline":                   {fmt.Errorf(`Get "https://127.0.0.1:6443/api/v1/namespaces/ns/services/https:hook:443/proxy/mutate": %w`, context.DeadlineExceeded), OutcomeFailed, ReasonTimeout},
		"no endpoint the service proxy can use says nothing":            {apierrors.NewServiceUnavailable(`no endpoints available for service "hook"`), OutcomeUnknown, ""},
		"no such service port says nothing":                             {apierrors.NewServiceUnavailable(`no service port 443 found for service "hook"`), OutcomeUnknown, ""},
		"RBAC says nothing about the road":                              {apierrors.NewForbidden(services, "https:hook:443", errors.New(`User "system:serviceaccount:x:y" cannot get resource "services/proxy" in API group "" in the namespace "ns"`)), OutcomeUnknown, ""},
		"an unauthenticated guard says nothing":                         {apierrors.NewUnauthorized("Unauthorized"), OutcomeUnknown, ""},
		"priority and fairness throttling says nothing":                 {apierrors.NewTooManyRequests("too many requests", 1), OutcomeUnknown, ""},
		"a missing Service says nothing (the direct probe sees it)":     {apierrors.NewNotFound(services, "hook"), OutcomeUnknown, ""},
		"an error that is not an answer (the guard's own) says nothing": {errors.New("dial tcp 127.0.0.1:6443: connect: connection refused"), OutcomeUnknown, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res := ClassifyPath(tc.err, "hook")
			assert.Equal(t, tc.outcome, res.Outcome, "%v", res.Err)
			assert.Equal(t, tc.reason, res.Reason)
			if tc.outcome != OutcomeHealthy {
				assert.Error(t, res.Err)
			}
		})
	}
}

func TestProxyName(t *testing.T) {
	assert.Equal(t, "https:hook:443", ProxyName(admissionregistrationv1.ServiceReference{Namespace: "ns", Name: "hook"}))
	assert.Equal(t, "https:hook:8443", ProxyName(admissionregistrationv1.ServiceReference{Namespace: "ns", Name: "hook", Port: ptr.To[int32](8443)}))
}

// A stand-in for kube-apiserver's service proxy endpoint: what the path
// prober sends, and what it makes of the apiserver's answers.
func TestPathProber_Probe(t *testing.T) {
	var gotPath atomic.Value
	var answer atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := answer.Load().(string)
		if r.URL.Path == "/version" {
			if a == "apiserver-silent" {
				<-r.Context().Done()
				return
			}
			_, _ = w.Write([]byte(`{"major":"1","minor":"37"}`))
			return
		}
		gotPath.Store(r.Method + " " + r.URL.Path)
		switch a {
		case "ok":
			_, _ = w.Write([]byte("ok"))
		case "hang", "apiserver-silent":
			<-r.Context().Done()
		case "tls-from-backend":
			st := apierrors.NewServiceUnavailable("error trying to reach service: remote error: tls: certificate required").ErrStatus
			st.APIVersion, st.Kind = "v1", "Status"
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(&st)
		case "relayed-500":
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte("webhook broke"))
		case "apiserver-500":
			st := apierrors.NewInternalError(errors.New("etcd is slow")).ErrStatus
			st.APIVersion, st.Kind = "v1", "Status"
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_ = json.NewEncoder(w).Encode(&st)
		case "unreachable":
			st := apierrors.NewServiceUnavailable("error trying to reach service: dial tcp 10.255.0.1:8443: connect: connection refused").ErrStatus
			st.APIVersion, st.Kind = "v1", "Status"
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(&st)
		}
	}))
	t.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	require.NoError(t, err)
	p := &PathProber{Client: cs.CoreV1().RESTClient()}
	svc := admissionregistrationv1.ServiceReference{Namespace: "webhooks", Name: "hook", Port: ptr.To[int32](8443), Path: ptr.To("/mutate")}

	answer.Store("ok")
	res := p.Probe(context.Background(), svc, "/mutate", time.Second)
	assert.Equal(t, OutcomeHealthy, res.Outcome, "%v", res.Err)
	assert.Equal(t, "GET /api/v1/namespaces/webhooks/services/https:hook:8443/proxy/mutate", gotPath.Load())

	answer.Store("unreachable")
	res = p.Probe(context.Background(), svc, "/mutate", time.Second)
	assert.Equal(t, OutcomeFailed, res.Outcome)
	assert.Equal(t, ReasonRefused, res.Reason)
	assert.Contains(t, res.Err.Error(), "error trying to reach service")

	answer.Store("hang")
	start := time.Now()
	res = p.Probe(context.Background(), svc, "/mutate", 200*time.Millisecond)
	assert.Equal(t, OutcomeFailed, res.Outcome, "%v", res.Err)
	assert.Equal(t, ReasonTimeout, res.Reason)
	assert.Contains(t, res.Err.Error(), "no answer from kube-apiserver's service proxy within 200ms")
	assert.Less(t, time.Since(start), 5*time.Second, "the probe brings its own deadline")

	answer.Store("apiserver-silent")
	res = p.Probe(context.Background(), svc, "/mutate", 200*time.Millisecond)
	assert.Equal(t, OutcomeUnknown, res.Outcome, "kube-apiserver answering nothing at all is the guard's own road: %v", res.Err)
	assert.Contains(t, res.Err.Error(), "does not answer the guard either")

	answer.Store("tls-from-backend")
	res = p.Probe(context.Background(), svc, "/mutate", time.Second)
	assert.Equal(t, OutcomeHealthy, res.Outcome, "a TLS error of the webhook's server means the road carried the connection: %v", res.Err)

	answer.Store("relayed-500")
	res = p.Probe(context.Background(), svc, "/mutate", time.Second)
	assert.Equal(t, OutcomeHealthy, res.Outcome, "%v", res.Err)

	answer.Store("apiserver-500")
	res = p.Probe(context.Background(), svc, "/mutate", time.Second)
	assert.Equal(t, OutcomeUnknown, res.Outcome, "kube-apiserver's own 500 says nothing about the road: %v", res.Err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res = p.Probe(ctx, svc, "/mutate", time.Second)
	assert.Equal(t, OutcomeUnknown, res.Outcome, "the guard stopping says nothing about the road")
}
