package harness

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Behaviour is how the test webhook answers a request on one path.
type Behaviour struct {
	// Delay is slept before answering (or before dropping the connection).
	Delay time.Duration
	// Answer produces the response; nil means drop the connection.
	answer func(w http.ResponseWriter, review *admissionv1.AdmissionReview)
	name   string
	// choose, when set, picks the behaviour for each request from its
	// review (an empty one for a GET).
	choose func(review *admissionv1.AdmissionReview) Behaviour
}

// String names the behaviour for logs.
func (b Behaviour) String() string { return b.name }

// Allow answers allowed: true.
func Allow() Behaviour {
	return Behaviour{name: "allow", answer: func(w http.ResponseWriter, r *admissionv1.AdmissionReview) {
		writeReview(w, r, &admissionv1.AdmissionResponse{Allowed: true})
	}}
}

// Deny answers allowed: false with message.
func Deny(message string) Behaviour {
	return Behaviour{name: "deny", answer: func(w http.ResponseWriter, r *admissionv1.AdmissionReview) {
		writeReview(w, r, &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: message,
		}})
	}}
}

// PatchLabel allows and adds the label key=value with a JSONPatch. The
// object must already have metadata.labels.
func PatchLabel(key, value string) Behaviour {
	return Behaviour{name: "patch", answer: func(w http.ResponseWriter, r *admissionv1.AdmissionReview) {
		patch := fmt.Sprintf(`[{"op":"add","path":"/metadata/labels/%s","value":%q}]`, key, value)
		pt := admissionv1.PatchTypeJSONPatch
		writeReview(w, r, &admissionv1.AdmissionResponse{Allowed: true, Patch: []byte(patch), PatchType: &pt})
	}}
}

// Garbage answers 200 with a body that is not an AdmissionReview.
func Garbage() Behaviour {
	return Behaviour{name: "garbage", answer: func(w http.ResponseWriter, _ *admissionv1.AdmissionReview) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "this is not json{")
	}}
}

// WrongUID answers allowed: true for a different uid than was asked.
func WrongUID() Behaviour {
	return Behaviour{name: "wrong-uid", answer: func(w http.ResponseWriter, r *admissionv1.AdmissionReview) {
		writeReview(w, r, &admissionv1.AdmissionResponse{Allowed: true, UID: "not-the-request-uid"})
	}}
}

// ByLabel answers a request whose object carries the label key=value
// with match, and every other request (and every GET) with other: a
// webhook that fails only on some requests' content.
func ByLabel(key, value string, match, other Behaviour) Behaviour {
	return Behaviour{name: fmt.Sprintf("%s if %s=%s, else %s", match, key, value, other), choose: func(r *admissionv1.AdmissionReview) Behaviour {
		if r.Request == nil {
			return other
		}
		var obj struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if json.Unmarshal(r.Request.Object.Raw, &obj) == nil && obj.Metadata.Labels[key] == value {
			return match
		}
		return other
	}}
}

// Drop closes the connection without answering.
func Drop() Behaviour { return Behaviour{name: "drop"} }

// Delayed returns b answering after d.
func Delayed(d time.Duration, b Behaviour) Behaviour {
	b.Delay = d
	b.name = fmt.Sprintf("%s after %s", b.name, d)
	return b
}

func writeReview(w http.ResponseWriter, req *admissionv1.AdmissionReview, resp *admissionv1.AdmissionResponse) {
	if resp.UID == "" && req.Request != nil {
		resp.UID = req.Request.UID
	}
	out := admissionv1.AdmissionReview{TypeMeta: req.TypeMeta, Response: resp}
	if out.APIVersion == "" {
		out.APIVersion, out.Kind = "admission.k8s.io/v1", "AdmissionReview"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&out)
}

// WebhookOptions say where a Webhook listens and which names its
// certificate carries.
type WebhookOptions struct {
	// Host is the address to listen on: 127.0.0.1 for clientConfig.url, or
	// an address from NextServiceIP for clientConfig.service.
	Host string
	// Port is the port; 0 picks a free one.
	Port int
	// DNSNames are extra SANs, such as <service>.<namespace>.svc.
	DNSNames []string
}

// Webhook is a real TLS admission webhook for tests. Behaviours are chosen
// per path and can change while it serves; it counts calls per path.
type Webhook struct {
	*TLSServer

	mu         sync.Mutex
	behaviours map[string]Behaviour
	calls      map[string]int
	requests   map[string][]admissionv1.AdmissionReview
}

// StartWebhook starts a Webhook with a fresh CA. Unknown paths answer 404.
func StartWebhook(opts WebhookOptions) (*Webhook, error) {
	wh := &Webhook{behaviours: map[string]Behaviour{}, calls: map[string]int{}, requests: map[string][]admissionv1.AdmissionReview{}}
	srv, err := StartTLSServer(opts, http.HandlerFunc(wh.serve))
	if err != nil {
		return nil, err
	}
	wh.TLSServer = srv
	return wh, nil
}

func (wh *Webhook) serve(w http.ResponseWriter, r *http.Request) {
	wh.mu.Lock()
	b, ok := wh.behaviours[r.URL.Path]
	wh.calls[r.URL.Path]++
	wh.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	var review admissionv1.AdmissionReview
	if r.Method == http.MethodPost {
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, "decoding AdmissionReview: "+err.Error(), http.StatusBadRequest)
			return
		}
		wh.mu.Lock()
		wh.requests[r.URL.Path] = append(wh.requests[r.URL.Path], review)
		wh.mu.Unlock()
	}
	if b.choose != nil {
		b = b.choose(&review)
	}
	if b.Delay > 0 {
		select {
		case <-time.After(b.Delay):
		case <-r.Context().Done():
			// The caller gave up: abort, so that no empty 200 is written
			// into a stream its timeout is tearing down (a probe could
			// read that as a 0-length answer, bad-response, instead of
			// its timeout).
			panic(http.ErrAbortHandler)
		}
	}
	if b.answer == nil {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "ok")
		return
	}
	b.answer(w, &review)
}

// SetBehaviour chooses how path is answered from now on. A GET on path
// (a health check) answers 200 "ok" after the same delay, or is dropped.
func (wh *Webhook) SetBehaviour(path string, b Behaviour) {
	wh.mu.Lock()
	defer wh.mu.Unlock()
	wh.behaviours[path] = b
}

// Calls returns how many requests path has received.
func (wh *Webhook) Calls(path string) int {
	wh.mu.Lock()
	defer wh.mu.Unlock()
	return wh.calls[path]
}

// Requests returns the AdmissionReviews received on path.
func (wh *Webhook) Requests(path string) []admissionv1.AdmissionReview {
	wh.mu.Lock()
	defer wh.mu.Unlock()
	return append([]admissionv1.AdmissionReview(nil), wh.requests[path]...)
}

// APIServerCalls counts the AdmissionReviews on path that are not dry
// runs: the calls kube-apiserver made for real requests, not a probe's.
func (wh *Webhook) APIServerCalls(path string) int {
	n := 0
	for _, r := range wh.Requests(path) {
		if r.Request != nil && (r.Request.DryRun == nil || !*r.Request.DryRun) {
			n++
		}
	}
	return n
}

// Port is the port it listens on.
func (wh *Webhook) Port() int32 { return int32(wh.listener.Addr().(*net.TCPAddr).Port) }

// CABundleBase64 is the CA in the base64 form a YAML caBundle needs.
func (wh *Webhook) CABundleBase64() string {
	return base64.StdEncoding.EncodeToString(wh.CA.CertPEM)
}
