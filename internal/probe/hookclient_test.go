package probe

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	webhookutil "k8s.io/apiserver/pkg/util/webhook"
	"sigs.k8s.io/yaml"
)

// allowing is the allowing v1 answer to in.
func allowing(in *admissionv1.AdmissionReview) *admissionv1.AdmissionReview {
	return &admissionv1.AdmissionReview{TypeMeta: in.TypeMeta, Response: &admissionv1.AdmissionResponse{UID: in.Request.UID, Allowed: true}}
}

// reply answers an AdmissionReview with status, Content-Type (none when
// empty) and the body encode makes of the allowing answer.
func reply(t testing.TB, status int, contentType string, encode func(any) ([]byte, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := encode(allowing(readReview(t, r)))
		if err != nil {
			t.Errorf("encoding the answer: %v", err)
		}
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		} else {
			w.Header()["Content-Type"] = nil // no sniffing either
		}
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}
}

// kube-apiserver decodes a webhook's answer with the ClientManager's
// NegotiatedSerializerWrapper: its one SerializerInfo has no media type, so
// runtime.SerializerInfoForMediaType matches any Content-Type (or none:
// client-go's transformResponse then uses the client's own,
// application/json), and the decoder is CodecFactory.LegacyCodec, whose
// universal deserializer reads JSON and YAML alike. client-go's
// transformResponse takes statuses 200-206 as success and decodes them;
// any other is a *StatusError, which the dispatchers
// (mutating/validating dispatcher.go callHook) turn into a calling error.
func TestProber_Probe_answersAsKubeAPIServerReadsThem(t *testing.T) {
	tests := map[string]struct {
		handler    http.HandlerFunc
		outcome    Outcome
		reason     FailureReason
		httpStatus int
	}{
		"JSON as text/plain is healthy": {
			handler: reply(t, http.StatusOK, "text/plain; charset=utf-8", json.Marshal),
			outcome: OutcomeHealthy, httpStatus: http.StatusOK,
		},
		"JSON without a Content-Type is healthy": {
			handler: reply(t, http.StatusOK, "", json.Marshal),
			outcome: OutcomeHealthy, httpStatus: http.StatusOK,
		},
		"JSON as application/octet-stream is healthy": {
			handler: reply(t, http.StatusOK, "application/octet-stream", json.Marshal),
			outcome: OutcomeHealthy, httpStatus: http.StatusOK,
		},
		"YAML as application/yaml is healthy": {
			handler: reply(t, http.StatusOK, "application/yaml", yaml.Marshal),
			outcome: OutcomeHealthy, httpStatus: http.StatusOK,
		},
		"YAML as application/json is healthy": {
			handler: reply(t, http.StatusOK, "application/json", yaml.Marshal),
			outcome: OutcomeHealthy, httpStatus: http.StatusOK,
		},
		"201 with a valid answer is healthy": {
			handler: reply(t, http.StatusCreated, "application/json", json.Marshal),
			outcome: OutcomeHealthy, httpStatus: http.StatusCreated,
		},
		"202 with a valid answer is healthy": {
			handler: reply(t, http.StatusAccepted, "application/json", json.Marshal),
			outcome: OutcomeHealthy, httpStatus: http.StatusAccepted,
		},
		"206 with a valid answer is healthy": {
			handler: reply(t, http.StatusPartialContent, "application/json", json.Marshal),
			outcome: OutcomeHealthy, httpStatus: http.StatusPartialContent,
		},
		"204 is a bad response: it carries no body": {
			handler: reply(t, http.StatusNoContent, "application/json", json.Marshal),
			outcome: OutcomeFailed, reason: ReasonBadResponse, httpStatus: http.StatusNoContent,
		},
		"207 with a valid answer is an http-status failure": {
			handler: reply(t, http.StatusMultiStatus, "application/json", json.Marshal),
			outcome: OutcomeFailed, reason: ReasonHTTPStatus, httpStatus: http.StatusMultiStatus,
		},
		"an unparsable Content-Type is a bad response": {
			handler: reply(t, http.StatusOK, "application/json; =", json.Marshal),
			outcome: OutcomeFailed, reason: ReasonBadResponse,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			wh, calls := localWebhook(t, tc.handler)
			res := (&Prober{Discovery: testDiscovery()}).Probe(t.Context(), wh, Spec{Timeout: 5 * time.Second})
			assert.Equal(t, tc.outcome, res.Outcome, "err: %v", res.Err)
			assert.Equal(t, tc.reason, res.Reason, "err: %v", res.Err)
			assert.Equal(t, tc.httpStatus, res.HTTPStatus)
			assert.EqualValues(t, 1, calls.Load())
		})
	}
}

// kube-apiserver's client follows a redirect (rest.HTTPClientFor builds a
// plain http.Client, without CheckRedirect), and a 307 keeps the POST and
// its body: the answer of the server redirected to is the one that counts.
func TestProber_Probe_aRedirectIsFollowed(t *testing.T) {
	ca := newTestCA(t)
	target, targetCalls := startTLS(t, ca.leaf(t, nil, localhost), answer(t, nil))
	srv, calls := startTLS(t, ca.leaf(t, nil, localhost), func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/elsewhere", http.StatusTemporaryRedirect)
	})
	res := (&Prober{Discovery: testDiscovery()}).Probe(t.Context(), urlWebhook(srv.URL+"/mutate", ca.pem), Spec{})
	assert.Equal(t, OutcomeHealthy, res.Outcome, "err: %v", res.Err)
	assert.Equal(t, http.StatusOK, res.HTTPStatus)
	assert.EqualValues(t, 1, calls.Load())
	assert.EqualValues(t, 1, targetCalls.Load())
}

// padded answers with the allowing answer followed by JSON whitespace up
// to size bytes in all.
func padded(t testing.TB, size int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := json.Marshal(allowing(readReview(t, r)))
		if err != nil || len(body) > size {
			t.Errorf("encoding the answer: %v (%d bytes)", err, len(body))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		_, _ = io.Copy(w, io.LimitReader(zeroSpaces{}, int64(size-len(body))))
	}
}

// zeroSpaces reads as an endless run of spaces.
type zeroSpaces struct{}

func (zeroSpaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// MaxResponseBytes is the longest answer read: a valid review of exactly
// that length is healthy, one byte more is a bad response.
func TestProber_Probe_maxResponseBytes(t *testing.T) {
	tests := map[string]struct {
		size    int
		outcome Outcome
		reason  FailureReason
	}{
		"an answer of exactly MaxResponseBytes is healthy": {size: MaxResponseBytes, outcome: OutcomeHealthy},
		"an answer just under MaxResponseBytes is healthy": {size: MaxResponseBytes - 1, outcome: OutcomeHealthy},
		"an answer one byte over is a bad response":        {size: MaxResponseBytes + 1, outcome: OutcomeFailed, reason: ReasonBadResponse},
		"an answer far over is a bad response":             {size: 2 * MaxResponseBytes, outcome: OutcomeFailed, reason: ReasonBadResponse},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			wh, _ := localWebhook(t, padded(t, tc.size))
			res := (&Prober{Discovery: testDiscovery()}).Probe(t.Context(), wh, Spec{Timeout: 10 * time.Second})
			assert.Equal(t, tc.outcome, res.Outcome, "err: %v", res.Err)
			assert.Equal(t, tc.reason, res.Reason, "err: %v", res.Err)
			if tc.outcome == OutcomeFailed {
				assert.ErrorContains(t, res.Err, "exceeds")
			}
		})
	}
}

// v1beta1Review is what a v1beta1-only webhook receives.
type v1beta1Review struct {
	APIVersion string                             `json:"apiVersion"`
	Kind       string                             `json:"kind"`
	Request    *admissionv1beta1.AdmissionRequest `json:"request"`
}

// A webhook accepting only v1beta1 is sent an admission.k8s.io/v1beta1
// review (request.CreateAdmissionObjects takes the first version of its
// admissionReviewVersions that kube-apiserver knows), and its v1beta1
// answer is checked as kube-apiserver checks one
// (request.VerifyAdmissionResponse: no uid, kind or patchType check).
func TestProber_Probe_v1beta1Webhook(t *testing.T) {
	tests := map[string]struct {
		versions []string
		respond  func(*admissionv1beta1.AdmissionResponse, *v1beta1Review)
		outcome  Outcome
		reason   FailureReason
	}{
		"a v1beta1 answer is healthy": {versions: []string{"v1beta1"}, outcome: OutcomeHealthy},
		"v1beta1 listed first is sent": {
			versions: []string{"v1beta1", "v1"}, outcome: OutcomeHealthy,
		},
		"an unknown version before v1beta1 is skipped": {
			versions: []string{"v2", "v1beta1"}, outcome: OutcomeHealthy,
		},
		"a v1beta1 answer with another uid is healthy: kube-apiserver does not check it": {
			versions: []string{"v1beta1"},
			respond:  func(r *admissionv1beta1.AdmissionResponse, _ *v1beta1Review) { r.UID = "another" },
			outcome:  OutcomeHealthy,
		},
		"a v1beta1 answer with a patch but no patchType is healthy": {
			versions: []string{"v1beta1"},
			respond: func(r *admissionv1beta1.AdmissionResponse, _ *v1beta1Review) {
				r.Patch = []byte(`[{"op":"add","path":"/metadata/annotations","value":{"a":"b"}}]`)
			},
			outcome: OutcomeHealthy,
		},
		"a v1beta1 answer with an undecodable patch is a bad response": {
			versions: []string{"v1beta1"},
			respond:  func(r *admissionv1beta1.AdmissionResponse, _ *v1beta1Review) { r.Patch = []byte(`{"op":"add"}`) },
			outcome:  OutcomeFailed, reason: ReasonBadResponse,
		},
		"a v1beta1 review without a response is a bad response": {
			versions: []string{"v1beta1"},
			respond: func(r *admissionv1beta1.AdmissionResponse, _ *v1beta1Review) {
				*r = admissionv1beta1.AdmissionResponse{}
			},
			outcome: OutcomeFailed, reason: ReasonBadResponse,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got recorder[v1beta1Review]
			wh, _ := localWebhook(t, func(w http.ResponseWriter, r *http.Request) {
				var in v1beta1Review
				if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Request == nil {
					t.Errorf("server received an invalid AdmissionReview: %v", err)
					return
				}
				got.add(in)
				out := map[string]any{"apiVersion": in.APIVersion, "kind": in.Kind}
				resp := &admissionv1beta1.AdmissionResponse{UID: in.Request.UID, Allowed: true}
				if tc.respond != nil {
					tc.respond(resp, &in)
				}
				if resp.UID != "" || resp.Allowed {
					out["response"] = resp
				}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(out)
			})
			wh.AdmissionReviewVersions = tc.versions
			res := (&Prober{Discovery: testDiscovery()}).Probe(t.Context(), wh, Spec{})
			assert.Equal(t, tc.outcome, res.Outcome, "err: %v", res.Err)
			assert.Equal(t, tc.reason, res.Reason, "err: %v", res.Err)
			all := got.all()
			require.Len(t, all, 1)
			assert.Equal(t, "admission.k8s.io/v1beta1", all[0].APIVersion)
			assert.Equal(t, "AdmissionReview", all[0].Kind)
			req := all[0].Request
			assert.NotEmpty(t, req.UID)
			assert.Equal(t, admissionv1beta1.Create, req.Operation)
			assert.Equal(t, "deployments", req.Resource.Resource)
			require.NotNil(t, req.DryRun)
			assert.True(t, *req.DryRun)
		})
	}
}

// One Prober probing a v1 and a v1beta1 webhook of the same resource sends
// each its own version, and each answer in that version is healthy: the
// cached body is per version list.
func TestProber_Probe_reviewVersionPerWebhook(t *testing.T) {
	p := &Prober{Discovery: testDiscovery()}
	for _, tc := range []struct {
		versions []string
		want     string
	}{
		{[]string{"v1"}, "admission.k8s.io/v1"},
		{[]string{"v1beta1"}, "admission.k8s.io/v1beta1"},
		{[]string{"v1"}, "admission.k8s.io/v1"},
	} {
		var got recorder[string]
		wh, _ := localWebhook(t, func(w http.ResponseWriter, r *http.Request) {
			var in struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Request    struct {
					UID string `json:"uid"`
				} `json:"request"`
			}
			_ = json.NewDecoder(r.Body).Decode(&in)
			got.add(in.APIVersion)
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{
				"apiVersion": in.APIVersion, "kind": in.Kind,
				"response": map[string]any{"uid": in.Request.UID, "allowed": true},
			})
		})
		wh.AdmissionReviewVersions = tc.versions
		res := p.Probe(t.Context(), wh, Spec{})
		assert.Equal(t, OutcomeHealthy, res.Outcome, "admissionReviewVersions %v: %v", tc.versions, res.Err)
		assert.Equal(t, []string{tc.want}, got.all(), "admissionReviewVersions %v", tc.versions)
	}
}

// Every field of a clientConfig makes another client, as the
// ClientManager's JSON key did.
func TestClientKey_tellsEveryClientConfigApart(t *testing.T) {
	svc := func(ns, name, path string, port int32) *webhookutil.ClientConfigService {
		return &webhookutil.ClientConfigService{Namespace: ns, Name: name, Path: path, Port: port}
	}
	configs := map[string]webhookutil.ClientConfig{
		"a url":                              {URL: "https://a.example.com/mutate", CABundle: []byte("ca1")},
		"the same url with another caBundle": {URL: "https://a.example.com/mutate", CABundle: []byte("ca2")},
		"another url":                        {URL: "https://a.example.com/validate", CABundle: []byte("ca1")},
		"a service":                          {Service: svc("ns", "hook", "/mutate", 443), CABundle: []byte("ca1")},
		"the service on another port":        {Service: svc("ns", "hook", "/mutate", 8443), CABundle: []byte("ca1")},
		"the service at another path":        {Service: svc("ns", "hook", "/validate", 443), CABundle: []byte("ca1")},
		"another service name":               {Service: svc("ns", "hook2", "/mutate", 443), CABundle: []byte("ca1")},
		"another namespace":                  {Service: svc("ns2", "hook", "/mutate", 443), CABundle: []byte("ca1")},
		"names that shift a separator":       {Service: svc("nsh", "ook", "/mutate", 443), CABundle: []byte("ca1")},
		"a service without a caBundle":       {Service: svc("ns", "hook", "/mutate", 443)},
	}
	seen := map[string]string{}
	for name, cc := range configs {
		key := clientKey(cc)
		if other, ok := seen[key]; ok {
			t.Errorf("%q and %q have the same key", name, other)
		}
		seen[key] = name
		assert.Equal(t, key, clientKey(cc), "%s: the key is stable", name)
	}
}

// The connections a probe keeps use the small buffers of connBuffers, and
// messages longer than them still pass whole: a 6 KiB answer header and a
// 40 KiB answer.
func TestProber_Probe_connectionBuffersCarryLongerMessages(t *testing.T) {
	long := strings.Repeat("x", 40<<10)
	wh, calls := localWebhook(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Long", strings.Repeat("h", 6<<10))
		writeAnswer(w, readReview(t, r), func(a *admissionv1.AdmissionReview) {
			a.Response.Warnings = []string{long}
		})
	})
	p := &Prober{Discovery: testDiscovery()}
	for range 3 { // the second and third on the kept connection
		res := p.Probe(t.Context(), wh, Spec{Timeout: 5 * time.Second})
		require.Equal(t, OutcomeHealthy, res.Outcome, "err: %v", res.Err)
	}
	assert.EqualValues(t, 3, calls.Load())

	c, err := p.hookClient(wh.ClientConfig)
	require.NoError(t, err)
	tr := innerTransport(c.Client.Transport)
	require.NotNil(t, tr, "no *http.Transport under %T", c.Client.Transport)
	assert.Equal(t, connBuffers.read, tr.ReadBufferSize)
	assert.Equal(t, connBuffers.write, tr.WriteBufferSize)
	assert.Less(t, connBuffers.read+connBuffers.write, 8<<10, "smaller than net/http's 4 KiB each way")
}

// BenchmarkProber_Probe_connectionBuffers compares net/http's default
// connection buffers with the probe's, side by side: the time of a probe on
// a kept connection, and the heap each webhook's kept connection holds
// after a probe (both ends: the test's servers are in this process, and
// theirs are the same in both).
//
//	go test ./internal/probe/ -run '^$' -bench connectionBuffers -benchmem -count 6
func BenchmarkProber_Probe_connectionBuffers(b *testing.B) {
	const webhooks = 200
	for _, bc := range []struct {
		name string
		size bufferSizes
	}{
		{"net-http-default", bufferSizes{read: 4 << 10, write: 4 << 10}},
		{"probe", connBuffers},
	} {
		b.Run(bc.name, func(b *testing.B) {
			defer func(old bufferSizes) { connBuffers = old }(connBuffers)
			connBuffers = bc.size
			hooks := make([]admissionregistrationv1.MutatingWebhook, webhooks)
			for i := range hooks {
				hooks[i], _ = localWebhook(b, answer(b, nil))
			}
			p := &Prober{Discovery: testDiscovery()}
			ctx := context.Background()
			for i := range hooks { // clients built, no connection yet
				if _, err := p.hookClient(hooks[i].ClientConfig); err != nil {
					b.Fatal(err)
				}
			}
			before := liveHeap()
			for i := range hooks {
				if res := p.Probe(ctx, hooks[i], Spec{}); res.Outcome != OutcomeHealthy {
					b.Fatalf("probe not healthy: %v", res.Err)
				}
			}
			held := float64(liveHeap()-before) / webhooks
			i := 0
			for b.Loop() {
				if res := p.Probe(ctx, hooks[i%webhooks], Spec{}); res.Outcome != OutcomeHealthy {
					b.Fatalf("probe not healthy: %v", res.Err)
				}
				i++
			}
			b.ReportMetric(held, "heap-B/conn")
		})
	}
}

// liveHeap is the heap in use after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
