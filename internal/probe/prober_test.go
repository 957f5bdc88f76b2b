package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// localWebhook starts a TLS server on 127.0.0.1 signed by a fresh CA and
// returns a dry-run-safe url webhook trusting that CA.
func localWebhook(t testing.TB, h http.HandlerFunc) (admissionregistrationv1.MutatingWebhook, *atomic.Int64) {
	t.Helper()
	ca := newTestCA(t)
	srv, calls := startTLS(t, ca.leaf(t, nil, localhost), h)
	return urlWebhook(srv.URL+"/mutate", ca.pem), calls
}

func TestProber_Probe_healthyAnswers(t *testing.T) {
	tests := map[string]func(*admissionv1.AdmissionReview){
		"an allowing webhook is healthy": nil,
		"a webhook answering allowed false is healthy": func(r *admissionv1.AdmissionReview) {
			r.Response.Allowed = false
			r.Response.Result = &metav1.Status{Message: "denied by policy", Code: 403}
		},
		"a webhook answering with a JSONPatch is healthy": func(r *admissionv1.AdmissionReview) {
			r.Response.Patch = []byte(`[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]`)
			r.Response.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
		},
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			wh, calls := localWebhook(t, answer(t, mutate))
			res := (&Prober{Discovery: testDiscovery()}).Probe(t.Context(), wh, Spec{})
			require.NoError(t, res.Err)
			assert.Equal(t, OutcomeHealthy, res.Outcome)
			assert.Empty(t, res.Reason)
			assert.Equal(t, http.StatusOK, res.HTTPStatus)
			assert.Positive(t, res.Duration)
			assert.EqualValues(t, 1, calls.Load())
		})
	}
}

func TestProber_Probe_allowedFalseIsHealthy(t *testing.T) {
	wh, _ := localWebhook(t, answer(t, func(r *admissionv1.AdmissionReview) { r.Response.Allowed = false }))
	res := (&Prober{Discovery: testDiscovery()}).Probe(t.Context(), wh, Spec{Kind: KindAdmissionReview})
	assert.Equal(t, OutcomeHealthy, res.Outcome, "err: %v", res.Err)
}

func TestProber_Probe_failures(t *testing.T) {
	hijackAndClose := func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}
	sleepPastTimeout := func(w http.ResponseWriter, r *http.Request) {
		// Reading the body lets the server notice the client hanging up.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
		}
	}
	respond := func(status int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}
	}
	tests := map[string]struct {
		webhook    func(t *testing.T) admissionregistrationv1.MutatingWebhook
		spec       Spec
		reason     FailureReason
		httpStatus int
	}{
		"a server slower than the spec timeout is a timeout": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				wh, _ := localWebhook(t, sleepPastTimeout)
				wh.TimeoutSeconds = ptr.To[int32](30) // the spec timeout wins
				return wh
			},
			spec:   Spec{Timeout: 200 * time.Millisecond},
			reason: ReasonTimeout,
		},
		"a closed port is refused": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				addr := l.Addr().String()
				require.NoError(t, l.Close())
				return urlWebhook("https://"+addr+"/mutate", newTestCA(t).pem)
			},
			reason: ReasonRefused,
		},
		"a connection the server drops before answering is refused": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				wh, _ := localWebhook(t, hijackAndClose)
				return wh
			},
			reason: ReasonRefused,
		},
		"a certificate signed by another CA is a tls failure": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				wh, _ := localWebhook(t, answer(t, nil))
				wh.ClientConfig.CABundle = newTestCA(t).pem
				return wh
			},
			reason: ReasonTLS,
		},
		"a certificate without the URL host is a tls failure": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				ca := newTestCA(t)
				srv, _ := startTLS(t, ca.leaf(t, []string{"elsewhere.example.com"}, nil), answer(t, nil))
				return urlWebhook(srv.URL+"/mutate", ca.pem)
			},
			reason: ReasonTLS,
		},
		"a caBundle without a PEM certificate is a tls failure": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				wh, _ := localWebhook(t, answer(t, nil))
				wh.ClientConfig.CABundle = []byte("not a certificate")
				return wh
			},
			reason: ReasonTLS,
		},
		"a plain HTTP server is a tls failure": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				srv := httptest.NewServer(answer(t, nil))
				t.Cleanup(srv.Close)
				return urlWebhook("https://"+srv.Listener.Addr().String()+"/mutate", newTestCA(t).pem)
			},
			reason: ReasonTLS,
		},
		"HTTP 500 is an http-status failure": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				wh, _ := localWebhook(t, respond(http.StatusInternalServerError, "boom"))
				return wh
			},
			reason:     ReasonHTTPStatus,
			httpStatus: http.StatusInternalServerError,
		},
		"a 3xx status that is not a redirect is an http-status failure": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				wh, _ := localWebhook(t, respond(http.StatusMultipleChoices, "choose"))
				return wh
			},
			reason:     ReasonHTTPStatus,
			httpStatus: http.StatusMultipleChoices,
		},
		"HTTP 403 with a Status body is an http-status failure": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				wh, _ := localWebhook(t, func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusForbidden)
					_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"no","code":403}`)
				})
				return wh
			},
			reason:     ReasonHTTPStatus,
			httpStatus: http.StatusForbidden,
		},
		"a garbage body is a bad response": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				wh, _ := localWebhook(t, respond(http.StatusOK, "<html>hello</html>"))
				return wh
			},
			reason:     ReasonBadResponse,
			httpStatus: http.StatusOK,
		},
		"an empty body is a bad response": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				wh, _ := localWebhook(t, respond(http.StatusOK, ""))
				return wh
			},
			reason:     ReasonBadResponse,
			httpStatus: http.StatusOK,
		},
		"a body of the wrong structure is a bad response": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				wh, _ := localWebhook(t, respond(http.StatusOK,
					`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":"yes"}`))
				return wh
			},
			reason:     ReasonBadResponse,
			httpStatus: http.StatusOK,
		},
		"a response with the wrong uid is a bad response": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				wh, _ := localWebhook(t, answer(t, func(r *admissionv1.AdmissionReview) { r.Response.UID = "not-the-request-uid" }))
				return wh
			},
			reason:     ReasonBadResponse,
			httpStatus: http.StatusOK,
		},
		"a response with the wrong kind is a bad response": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				wh, _ := localWebhook(t, answer(t, func(r *admissionv1.AdmissionReview) { r.Kind = "AdmissionResponse" }))
				return wh
			},
			reason:     ReasonBadResponse,
			httpStatus: http.StatusOK,
		},
		"a response with the wrong apiVersion is a bad response": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				wh, _ := localWebhook(t, answer(t, func(r *admissionv1.AdmissionReview) { r.APIVersion = "admission.k8s.io/v1beta1" }))
				return wh
			},
			reason:     ReasonBadResponse,
			httpStatus: http.StatusOK,
		},
		"a review without a response is a bad response": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				wh, _ := localWebhook(t, answer(t, func(r *admissionv1.AdmissionReview) { r.Response = nil }))
				return wh
			},
			reason:     ReasonBadResponse,
			httpStatus: http.StatusOK,
		},
		"a patch without a patchType is a bad response": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				wh, _ := localWebhook(t, answer(t, func(r *admissionv1.AdmissionReview) {
					r.Response.Patch = []byte(`[]`)
				}))
				return wh
			},
			reason:     ReasonBadResponse,
			httpStatus: http.StatusOK,
		},
		"a patchType other than JSONPatch is a bad response": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				wh, _ := localWebhook(t, answer(t, func(r *admissionv1.AdmissionReview) {
					r.Response.Patch = []byte(`{"metadata":{"labels":{"a":"b"}}}`)
					r.Response.PatchType = ptr.To(admissionv1.PatchType("MergePatch"))
				}))
				return wh
			},
			reason:     ReasonBadResponse,
			httpStatus: http.StatusOK,
		},
		"a JSONPatch that is not a list of operations is a bad response": {
			webhook: func(t *testing.T) admissionregistrationv1.MutatingWebhook {
				wh, _ := localWebhook(t, answer(t, func(r *admissionv1.AdmissionReview) {
					r.Response.Patch = []byte(`{"op":"add"}`)
					r.Response.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
				}))
				return wh
			},
			reason:     ReasonBadResponse,
			httpStatus: http.StatusOK,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			wh := tc.webhook(t)
			spec := tc.spec
			if spec.Timeout == 0 {
				spec.Timeout = 5 * time.Second
			}
			res := (&Prober{Discovery: testDiscovery()}).Probe(t.Context(), wh, spec)
			t.Logf("err: %v", res.Err)
			require.Equal(t, OutcomeFailed, res.Outcome, "err: %v", res.Err)
			assert.Equal(t, tc.reason, res.Reason, "err: %v", res.Err)
			assert.Error(t, res.Err)
			assert.Equal(t, tc.httpStatus, res.HTTPStatus)
		})
	}
}

func TestProber_Probe_callerContextEndingIsUnknown(t *testing.T) {
	wh, _ := localWebhook(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	res := (&Prober{Discovery: testDiscovery()}).Probe(ctx, wh, Spec{Timeout: 5 * time.Second})
	assert.Equal(t, OutcomeUnknown, res.Outcome)
	assert.Empty(t, res.Reason)
	assert.Error(t, res.Err)
}

func TestProber_Probe_serviceReference(t *testing.T) {
	const ns, svc = "team", "hook"
	tests := map[string]struct {
		port       *int32
		certDNS    string
		wantPort   int32
		wantResult Outcome
		wantReason FailureReason
	}{
		"a non-443 port is passed to the resolver and ServerName is <svc>.<ns>.svc": {
			port: ptr.To[int32](8443), certDNS: "hook.team.svc", wantPort: 8443, wantResult: OutcomeHealthy,
		},
		"a nil port defaults to 443": {
			port: nil, certDNS: "hook.team.svc", wantPort: 443, wantResult: OutcomeHealthy,
		},
		"a certificate for another service name is a tls failure": {
			port: ptr.To[int32](8443), certDNS: "other.team.svc", wantPort: 8443, wantResult: OutcomeFailed, wantReason: ReasonTLS,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ca := newTestCA(t)
			var paths recorder[string]
			srv, _ := startTLS(t, ca.leaf(t, []string{tc.certDNS}, nil), func(w http.ResponseWriter, r *http.Request) {
				paths.add(r.URL.Path)
				answer(t, nil)(w, r)
			})
			resolver := &fakeResolver{addr: srv.Listener.Addr().String()}
			wh := serviceWebhook(ns, svc, tc.port, "/mutate", ca.pem)

			res := (&Prober{Discovery: testDiscovery(), Resolver: resolver}).Probe(t.Context(), wh, Spec{})

			assert.Equal(t, tc.wantResult, res.Outcome, "err: %v", res.Err)
			assert.Equal(t, tc.wantReason, res.Reason)
			assert.Equal(t, ns, resolver.namespace)
			assert.Equal(t, svc, resolver.name)
			assert.Equal(t, tc.wantPort, resolver.port)
			if tc.wantResult == OutcomeHealthy {
				assert.Equal(t, []string{"/mutate"}, paths.all())
			}
		})
	}
}

// TestProber_Probe_urlHostIsDialledAsAnAbsoluteName: kube-apiserver
// resolves a url webhook's host with its node's resolver, which knows no
// cluster search path. The guard's pod has one (ndots 5), in which the
// host a.b is first a.b.<the guard's namespace>.svc.cluster.local, then
// a.b.svc.cluster.local: the Service "a" of whoever may create the
// namespace "b". The probe must reach the webhook itself, with the TLS
// server name and Host header of its URL.
func TestProber_Probe_urlHostIsDialledAsAnAbsoluteName(t *testing.T) {
	tests := map[string]struct {
		spec Spec
		pool bool
	}{
		"an AdmissionReview probe":                {spec: Spec{}},
		"an HTTPGet probe":                        {spec: Spec{Kind: KindHTTPGet, Path: "/healthz"}},
		"an HTTPGet probe on a pooled connection": {spec: Spec{Kind: KindHTTPGet, Path: "/healthz"}, pool: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ca := newTestCA(t)
			var seen recorder[[2]string]
			webhook, _ := startTLS(t, ca.leaf(t, []string{"a.b"}, nil), func(w http.ResponseWriter, r *http.Request) {
				seen.add([2]string{r.TLS.ServerName, r.Host})
				if tc.spec.Kind == KindHTTPGet {
					return
				}
				answer(t, nil)(w, r)
			})
			// The tenant's Service cannot show a certificate the webhook's
			// caBundle trusts: reaching it is a tls failure.
			tenant, tenantCalls := startTLS(t, newTestCA(t).leaf(t, []string{"a.b"}, nil), answer(t, nil))
			network := &searchPathNetwork{
				search: []string{"webhook-guard-system.svc.cluster.local", "svc.cluster.local", "cluster.local"},
				ndots:  5,
				names: map[string]string{
					"a.b.svc.cluster.local.": tenant.Listener.Addr().String(),
					"a.b.":                   webhook.Listener.Addr().String(),
				},
			}
			_, port, err := net.SplitHostPort(webhook.Listener.Addr().String())
			require.NoError(t, err)
			p := &Prober{Discovery: testDiscovery(), netDial: network.dial}
			if tc.pool {
				p.Pool = &ConnectionPool{}
				t.Cleanup(p.Pool.Close)
			}

			res := p.Probe(t.Context(), urlWebhook("https://a.b:"+port+"/mutate", ca.pem), tc.spec)

			assert.Equal(t, OutcomeHealthy, res.Outcome, "err: %v", res.Err)
			assert.Equal(t, []string{"a.b.:" + port}, network.dialled.all(), "the addresses dialled")
			assert.Equal(t, []string{"a.b."}, network.found.all(), "the names the dials reached")
			assert.Equal(t, [][2]string{{"a.b", "a.b:" + port}}, seen.all(), "the TLS server name and Host header the webhook saw")
			assert.Zero(t, tenantCalls.Load())
		})
	}
}

// TestDialAddress_onlyTheURLHostIsAbsolute: the dial writes the url
// webhook's own host as an absolute name, and leaves every other address
// as net/http gives it.
func TestDialAddress_onlyTheURLHostIsAbsolute(t *testing.T) {
	tests := map[string]struct {
		address, urlHost, want string
	}{
		"the url's host gets a trailing dot":                      {"a.b:443", "a.b", "a.b.:443"},
		"a host of one label too":                                 {"hook:8443", "hook", "hook.:8443"},
		"an absolute host stays as it is":                         {"a.b.:443", "a.b.", "a.b.:443"},
		"an IPv4 literal stays as it is":                          {"10.0.0.1:443", "10.0.0.1", "10.0.0.1:443"},
		"an IPv6 literal stays as it is":                          {"[fd00::1]:443", "fd00::1", "[fd00::1]:443"},
		"an IPv6 literal with a zone stays as it is":              {"[fe80::1%eth0]:443", "fe80::1%eth0", "[fe80::1%eth0]:443"},
		"a proxy's host stays as the operator wrote it":           {"squid.proxy:3128", "a.b", "squid.proxy:3128"},
		"a service reference's ClusterIP has no url host":         {"10.96.0.10:443", "", "10.96.0.10:443"},
		"an internationalised host is dialled in ASCII, absolute": {"a.xn--bcher-kva:443", asciiHost("a.bücher"), "a.xn--bcher-kva.:443"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, dialAddress(tc.address, tc.urlHost))
		})
	}
}

func TestProber_Probe_resolverErrors(t *testing.T) {
	tests := map[string]struct {
		prober     *Prober
		outcome    Outcome
		wantReason FailureReason
	}{
		"an error wrapping ErrNoRoute is a no-route failure": {
			prober:     &Prober{Discovery: testDiscovery(), Resolver: &fakeResolver{err: errors.Join(errors.New("service gone"), ErrNoRoute)}},
			outcome:    OutcomeFailed,
			wantReason: ReasonNoRoute,
		},
		"any other resolver error is unknown": {
			prober:  &Prober{Discovery: testDiscovery(), Resolver: &fakeResolver{err: errors.New("forbidden: cannot get services")}},
			outcome: OutcomeUnknown,
		},
		"a missing resolver is unknown": {
			prober:  &Prober{Discovery: testDiscovery()},
			outcome: OutcomeUnknown,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			wh := serviceWebhook("team", "hook", nil, "/mutate", newTestCA(t).pem)
			res := tc.prober.Probe(t.Context(), wh, Spec{})
			assert.Equal(t, tc.outcome, res.Outcome)
			assert.Equal(t, tc.wantReason, res.Reason)
			assert.Error(t, res.Err)
		})
	}
}

func TestProber_Probe_emptyCABundleUsesSystemRoots(t *testing.T) {
	tests := map[string][]byte{
		"an override holding another CA does not trust the server": newTestCA(t).pem,
		"the real system roots do not trust a self-signed server":  nil,
	}
	for name, roots := range tests {
		t.Run(name, func(t *testing.T) {
			wh, calls := localWebhook(t, answer(t, nil))
			wh.ClientConfig.CABundle = nil
			res := (&Prober{Discovery: testDiscovery(), SystemRootsPEM: roots}).Probe(t.Context(), wh, Spec{})
			assert.Equal(t, OutcomeFailed, res.Outcome)
			assert.Equal(t, ReasonTLS, res.Reason, "err: %v", res.Err)
			assert.Zero(t, calls.Load())
		})
	}
	t.Run("an override holding the CA is trusted", func(t *testing.T) {
		ca := newTestCA(t)
		srv, _ := startTLS(t, ca.leaf(t, nil, localhost), answer(t, nil))
		res := (&Prober{Discovery: testDiscovery(), SystemRootsPEM: ca.pem}).Probe(t.Context(), urlWebhook(srv.URL, nil), Spec{})
		assert.Equal(t, OutcomeHealthy, res.Outcome, "err: %v", res.Err)
	})
	t.Run("an override without a certificate is unknown", func(t *testing.T) {
		wh, calls := localWebhook(t, answer(t, nil))
		wh.ClientConfig.CABundle = nil
		res := (&Prober{Discovery: testDiscovery(), SystemRootsPEM: []byte("not a certificate")}).Probe(t.Context(), wh, Spec{})
		assert.Equal(t, OutcomeUnknown, res.Outcome, "err: %v", res.Err)
		assert.Zero(t, calls.Load())
	})
}

func TestProber_Probe_unsafeSideEffectsAreUnknown(t *testing.T) {
	tests := map[string]*admissionregistrationv1.SideEffectClass{
		"sideEffects Some is not probed":    ptr.To(admissionregistrationv1.SideEffectClassSome),
		"sideEffects Unknown is not probed": ptr.To(admissionregistrationv1.SideEffectClassUnknown),
		"unset sideEffects are not probed":  nil,
	}
	for name, sideEffects := range tests {
		t.Run(name, func(t *testing.T) {
			wh, calls := localWebhook(t, answer(t, nil))
			wh.SideEffects = sideEffects
			res := (&Prober{Discovery: testDiscovery()}).Probe(t.Context(), wh, Spec{Kind: KindAdmissionReview})
			assert.Equal(t, OutcomeUnknown, res.Outcome)
			assert.ErrorContains(t, res.Err, "sideEffects")
			assert.Zero(t, calls.Load(), "no request may reach the webhook")
		})
	}
}

func TestProber_Probe_invalidSpecsAreUnknown(t *testing.T) {
	tests := map[string]struct {
		mutate func(*admissionregistrationv1.MutatingWebhook)
		spec   Spec
	}{
		"an unknown probe kind":     {spec: Spec{Kind: "Ping"}},
		"an HTTPGet without a path": {spec: Spec{Kind: KindHTTPGet}},
		"a negative timeout":        {spec: Spec{Timeout: -time.Second}},
		"a webhook accepting only reviews kube-apiserver does not send": {mutate: func(wh *admissionregistrationv1.MutatingWebhook) { wh.AdmissionReviewVersions = []string{"v2"} }},
		"a webhook without rules": {mutate: func(wh *admissionregistrationv1.MutatingWebhook) { wh.Rules = nil }},
		"a webhook whose rules only match a subresource": {mutate: func(wh *admissionregistrationv1.MutatingWebhook) {
			wh.Rules[0].Resources = []string{"deployments/scale"}
		}},
		"a webhook whose rules never match CREATE": {mutate: func(wh *admissionregistrationv1.MutatingWebhook) {
			wh.Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Delete}
		}},
		"a clientConfig with neither url nor service": {mutate: func(wh *admissionregistrationv1.MutatingWebhook) { wh.ClientConfig.URL = nil }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			wh, calls := localWebhook(t, answer(t, nil))
			if tc.mutate != nil {
				tc.mutate(&wh)
			}
			res := (&Prober{Discovery: testDiscovery()}).Probe(t.Context(), wh, tc.spec)
			assert.Equal(t, OutcomeUnknown, res.Outcome)
			assert.Error(t, res.Err)
			assert.Zero(t, calls.Load())
		})
	}
}

func TestProber_Probe_sendsDryRunAdmissionReview(t *testing.T) {
	type received struct {
		method, path, timeout, contentType string
		review                             *admissionv1.AdmissionReview
	}
	var rec recorder[received]
	wh, _ := localWebhook(t, func(w http.ResponseWriter, r *http.Request) {
		in := readReview(t, r)
		rec.add(received{r.Method, r.URL.Path, r.URL.Query().Get("timeout"), r.Header.Get("Content-Type"), in})
		writeAnswer(w, in, nil)
	})
	wh.TimeoutSeconds = ptr.To[int32](7)
	res := (&Prober{Discovery: testDiscovery(), Username: "system:serviceaccount:guard:probe"}).Probe(t.Context(), wh, Spec{})
	require.Equal(t, OutcomeHealthy, res.Outcome, "err: %v", res.Err)

	all := rec.all()
	require.Len(t, all, 1)
	got := all[0].review
	assert.Equal(t, http.MethodPost, all[0].method)
	assert.Equal(t, "/mutate", all[0].path)
	assert.Equal(t, "7s", all[0].timeout)
	// kube-apiserver sends the review as a runtime.Object, for which
	// client-go's Request.Body sets the client's Content-Type; webhooks
	// built on controller-runtime refuse any other.
	assert.Equal(t, "application/json", all[0].contentType)
	assert.Equal(t, "admission.k8s.io/v1", got.APIVersion)
	assert.Equal(t, "AdmissionReview", got.Kind)

	req := got.Request
	require.NotNil(t, req.DryRun)
	assert.True(t, *req.DryRun)
	assert.NotEmpty(t, req.UID)
	assert.Equal(t, admissionv1.Create, req.Operation)
	assert.Equal(t, metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, req.Resource)
	assert.Equal(t, metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, req.Kind)
	assert.Equal(t, "webhook-guard-probe", req.Name)
	assert.Equal(t, "default", req.Namespace, "a namespace that exists")
	assert.Equal(t, "system:serviceaccount:guard:probe", req.UserInfo.Username)
	var deployment appsv1.Deployment
	require.NoError(t, json.Unmarshal(req.Object.Raw, &deployment))
	assert.Equal(t, "webhook-guard-probe", deployment.Name)
	assert.Equal(t, "default", deployment.Namespace)
	require.Len(t, deployment.Spec.Template.Spec.Containers, 1, "a realistic Deployment, not a skeleton")
	assert.NotEmpty(t, deployment.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, deployment.Spec.Selector.MatchLabels, deployment.Spec.Template.Labels)

	var opts metav1.CreateOptions
	require.NoError(t, json.Unmarshal(req.Options.Raw, &opts))
	assert.Equal(t, "CreateOptions", opts.Kind)
	assert.Equal(t, []string{metav1.DryRunAll}, opts.DryRun)
}

func TestProber_Probe_eachProbeSendsAFreshUID(t *testing.T) {
	var rec recorder[string]
	wh, _ := localWebhook(t, func(w http.ResponseWriter, r *http.Request) {
		in := readReview(t, r)
		rec.add(string(in.Request.UID))
		writeAnswer(w, in, nil)
	})
	p := &Prober{Discovery: testDiscovery()}
	for range 2 {
		require.Equal(t, OutcomeHealthy, p.Probe(t.Context(), wh, Spec{}).Outcome)
	}
	uids := rec.all()
	require.Len(t, uids, 2)
	assert.NotEqual(t, uids[0], uids[1])
}

func TestProber_Probe_httpGet(t *testing.T) {
	tests := map[string]struct {
		status  int
		outcome Outcome
		reason  FailureReason
	}{
		"200 is healthy":                {status: http.StatusOK, outcome: OutcomeHealthy},
		"204 is healthy":                {status: http.StatusNoContent, outcome: OutcomeHealthy},
		"503 is an http-status failure": {status: http.StatusServiceUnavailable, outcome: OutcomeFailed, reason: ReasonHTTPStatus},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var rec recorder[[3]string]
			wh, _ := localWebhook(t, func(w http.ResponseWriter, r *http.Request) {
				rec.add([3]string{r.Method, r.URL.Path, r.URL.RawQuery})
				w.WriteHeader(tc.status)
			})
			// HTTPGet needs no dry-run safety.
			wh.SideEffects = ptr.To(admissionregistrationv1.SideEffectClassSome)
			res := (&Prober{Discovery: testDiscovery()}).Probe(t.Context(), wh, Spec{Kind: KindHTTPGet, Path: "/healthz?verbose=1"})
			assert.Equal(t, tc.outcome, res.Outcome, "err: %v", res.Err)
			assert.Equal(t, tc.reason, res.Reason)
			assert.Equal(t, tc.status, res.HTTPStatus)
			assert.Equal(t, [][3]string{{http.MethodGet, "/healthz", "verbose=1"}}, rec.all())
		})
	}
}

func TestProbeTimeout_precedence(t *testing.T) {
	tests := map[string]struct {
		spec           Spec
		timeoutSeconds *int32
		want           time.Duration
	}{
		"the spec timeout wins":                     {spec: Spec{Timeout: 3 * time.Second}, timeoutSeconds: ptr.To[int32](5), want: 3 * time.Second},
		"the slow-call threshold is used otherwise": {timeoutSeconds: ptr.To[int32](5), want: DefaultSlowCall},
		"a shorter timeoutSeconds caps it":          {timeoutSeconds: ptr.To[int32](2), want: 2 * time.Second},
		"the slow-call threshold is the default":    {want: DefaultSlowCall},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			wh := admissionregistrationv1.MutatingWebhook{TimeoutSeconds: tc.timeoutSeconds}
			assert.Equal(t, tc.want, probeTimeout(wh, tc.spec))
		})
	}
}

func TestDryRunSafe(t *testing.T) {
	tests := map[string]struct {
		sideEffects *admissionregistrationv1.SideEffectClass
		want        bool
	}{
		"None is safe":         {ptr.To(admissionregistrationv1.SideEffectClassNone), true},
		"NoneOnDryRun is safe": {ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun), true},
		"Some is not safe":     {ptr.To(admissionregistrationv1.SideEffectClassSome), false},
		"Unknown is not safe":  {ptr.To(admissionregistrationv1.SideEffectClassUnknown), false},
		"unset is not safe":    {nil, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, DryRunSafe(tc.sideEffects))
		})
	}
}

// TestProbeObject_realistic: the common kinds are sent as valid objects.
func TestProbeObject_realistic(t *testing.T) {
	target := func(group, version, resource, kind string) probeTarget {
		return probeTarget{gvr: metav1.GroupVersionResource{Group: group, Version: version, Resource: resource}, kind: kind, namespace: probeNamespace}
	}
	decode := func(t *testing.T, obj map[string]any, into any) {
		t.Helper()
		raw, err := json.Marshal(obj)
		require.NoError(t, err)
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(into), "%s", raw)
	}
	var pod corev1.Pod
	decode(t, probeObject("v1", target("", "v1", "pods", "Pod")), &pod)
	require.Len(t, pod.Spec.Containers, 1)
	assert.NotEmpty(t, pod.Spec.Containers[0].Image)
	var cm corev1.ConfigMap
	decode(t, probeObject("v1", target("", "v1", "configmaps", "ConfigMap")), &cm)
	assert.NotEmpty(t, cm.Data)
	var secret corev1.Secret
	decode(t, probeObject("v1", target("", "v1", "secrets", "Secret")), &secret)
	assert.Equal(t, corev1.SecretTypeOpaque, secret.Type)
	assert.NotEmpty(t, secret.Data)
	var ds appsv1.DaemonSet
	decode(t, probeObject("apps/v1", target("apps", "v1", "daemonsets", "DaemonSet")), &ds)
	require.Len(t, ds.Spec.Template.Spec.Containers, 1)
	generic := probeObject("example.com/v1", target("example.com", "v1", "widgets", "Widget"))
	assert.Equal(t, "Widget", generic["kind"])
	assert.Equal(t, "default", generic["metadata"].(map[string]any)["namespace"])
}

// TestProber_Probe_aTimeoutShortOfTimeoutSecondsIsSlow: a probe that gives
// up at its own timeout while kube-apiserver would still be waiting is a
// timeout marked slow; one that waited as long as kube-apiserver does, and
// any other failure, is not.
func TestProber_Probe_aTimeoutShortOfTimeoutSecondsIsSlow(t *testing.T) {
	tests := map[string]struct {
		hangs          bool // no answer at all; else HTTP 500 at once
		timeoutSeconds int32
		spec           Spec
		reason         FailureReason
		slow           bool
	}{
		"cut at the probe's timeout, below timeoutSeconds": {hangs: true, timeoutSeconds: 2, spec: Spec{Timeout: 100 * time.Millisecond}, reason: ReasonTimeout, slow: true},
		"cut at timeoutSeconds itself":                     {hangs: true, timeoutSeconds: 1, reason: ReasonTimeout},
		"an HTTP error before the probe's timeout":         {timeoutSeconds: 2, spec: Spec{Timeout: 100 * time.Millisecond}, reason: ReasonHTTPStatus},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			release := make(chan struct{})
			wh, _ := localWebhook(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.hangs {
					<-release
				}
				w.WriteHeader(http.StatusInternalServerError)
			})
			t.Cleanup(func() { close(release) }) // before the server closes
			wh.TimeoutSeconds = ptr.To(tc.timeoutSeconds)
			res := (&Prober{Discovery: testDiscovery()}).Probe(t.Context(), wh, tc.spec)
			assert.Equal(t, OutcomeFailed, res.Outcome, "err: %v", res.Err)
			assert.Equal(t, tc.reason, res.Reason)
			assert.Equal(t, tc.slow, res.Slow)
		})
	}
}

func TestProbeTimeout_cappedAtTimeoutSeconds(t *testing.T) {
	wh := admissionregistrationv1.MutatingWebhook{TimeoutSeconds: ptr.To[int32](2)}
	assert.Equal(t, 2*time.Second, probeTimeout(wh, Spec{Timeout: 5 * time.Second}), "the apiserver gives up after timeoutSeconds")
	assert.Equal(t, 500*time.Millisecond, probeTimeout(wh, Spec{Timeout: 500 * time.Millisecond}))
	assert.Equal(t, 2*time.Second, probeTimeout(wh, Spec{}))
	assert.Equal(t, DefaultTimeout, probeTimeout(admissionregistrationv1.MutatingWebhook{}, Spec{Timeout: time.Minute}), "kube-apiserver's default timeoutSeconds caps it")
}

func TestProber_Probe_resourceDiscoveryDoesNotKnowIsUnknown(t *testing.T) {
	wh, calls := localWebhook(t, answer(t, nil))
	wh.Rules = []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"},
		},
	}}
	res := (&Prober{Discovery: testDiscovery()}).Probe(t.Context(), wh, Spec{})
	assert.Equal(t, OutcomeUnknown, res.Outcome)
	assert.ErrorContains(t, res.Err, "widgets")
	assert.Zero(t, calls.Load())

	wh, calls = localWebhook(t, answer(t, nil))
	res = (&Prober{}).Probe(t.Context(), wh, Spec{})
	assert.Equal(t, OutcomeUnknown, res.Outcome, "no Discovery")
	assert.ErrorContains(t, res.Err, "discovery")
	assert.Zero(t, calls.Load())
}

func BenchmarkProber_Probe_admissionReview(b *testing.B) {
	wh, _ := localWebhook(b, answer(b, nil))
	p := &Prober{Discovery: testDiscovery()}
	ctx := context.Background()
	for b.Loop() {
		if res := p.Probe(ctx, wh, Spec{}); res.Outcome != OutcomeHealthy {
			b.Fatalf("probe not healthy: %v", res.Err)
		}
	}
}

// BenchmarkProber_Probe_httpGet is the side-by-side baseline for the
// AdmissionReview probe: same server, without building, sending and
// checking an AdmissionReview. Without a Pool it opens a fresh TLS
// connection per probe, where kube-apiserver's client (and so the
// AdmissionReview probe) keeps its connection: compare with
// BenchmarkProber_Probe_httpGetPooled.
func BenchmarkProber_Probe_httpGet(b *testing.B) {
	wh, _ := localWebhook(b, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.WriteHeader(http.StatusOK)
			return
		}
		answer(b, nil)(w, r)
	})
	p := &Prober{Discovery: testDiscovery()}
	ctx := context.Background()
	for b.Loop() {
		if res := p.Probe(ctx, wh, Spec{Kind: KindHTTPGet, Path: "/healthz"}); res.Outcome != OutcomeHealthy {
			b.Fatalf("probe not healthy: %v", res.Err)
		}
	}
}
