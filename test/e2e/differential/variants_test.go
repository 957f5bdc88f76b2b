package differential

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/yaml"
)

// hugePadding is how much JSON whitespace the huge variant puts inside a
// valid answer: 3 MiB.
const hugePadding = 3 << 20

// defaultTimeoutSeconds is the timeoutSeconds of every variant that does
// not test the timeout.
const defaultTimeoutSeconds = 5

// variant is one way the webhook answers.
type variant struct {
	// name is the path segment, and part of namespace and object names.
	name string
	// group is what the variant varies, desc what the webhook does.
	group, desc string
	// listener is the TLS listener that serves it; "" is main.
	listener string
	// timeoutSeconds is the webhook's; 0 is defaultTimeoutSeconds.
	timeoutSeconds int32
	// delay is slept before answering.
	delay time.Duration
	// answer is the response to req.
	answer func(req *admissionv1.AdmissionRequest) reply
}

// reply is an HTTP response.
type reply struct {
	status      int     // 0 is 200
	contentType *string // nil: no Content-Type header at all
	location    string
	body        []byte
}

func (r reply) write(w http.ResponseWriter) {
	if r.contentType == nil {
		// A nil value keeps net/http from sniffing one and adding it.
		w.Header()["Content-Type"] = nil
	} else {
		w.Header().Set("Content-Type", *r.contentType)
	}
	if r.location != "" {
		w.Header().Set("Location", r.location)
	}
	status := r.status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(r.body)
}

func ct(s string) *string { return &s }

// okReply is 200, application/json, with a v1 AdmissionReview around resp.
func okReply(resp map[string]any) reply {
	return reply{contentType: ct("application/json"), body: review("admission.k8s.io/v1", "AdmissionReview", resp)}
}

// review encodes an AdmissionReview envelope; an empty apiVersion or kind
// is left out.
func review(apiVersion, kind string, resp map[string]any) []byte {
	m := map[string]any{"response": resp}
	if apiVersion != "" {
		m["apiVersion"] = apiVersion
	}
	if kind != "" {
		m["kind"] = kind
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// allowed is the response allowed: true for req, nothing else.
func allowed(req *admissionv1.AdmissionRequest) map[string]any {
	return map[string]any{"uid": string(req.UID), "allowed": true}
}

// with returns resp with the extra fields.
func with(resp map[string]any, kv ...any) map[string]any {
	for i := 0; i+1 < len(kv); i += 2 {
		resp[kv[i].(string)] = kv[i+1]
	}
	return resp
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// addLabelPatch adds a label to the ConfigMap; the test's ConfigMaps (and
// the probe's object) have labels.
const addLabelPatch = `[{"op":"add","path":"/metadata/labels/differential.webhook-guard.io~1patched","value":"yes"}]`

// variants is the table. Every variant runs for a mutating and a
// validating webhook; in the validating rows, every variant that answers
// a patch is "a patch from a validating webhook".
func variants() []variant {
	allow := func(req *admissionv1.AdmissionRequest) reply { return okReply(allowed(req)) }
	withCT := func(c *string) func(req *admissionv1.AdmissionRequest) reply {
		return func(req *admissionv1.AdmissionRequest) reply {
			r := okReply(allowed(req))
			r.contentType = c
			return r
		}
	}
	withStatus := func(status int) func(req *admissionv1.AdmissionRequest) reply {
		return func(req *admissionv1.AdmissionRequest) reply {
			r := okReply(allowed(req))
			r.status = status
			return r
		}
	}
	redirect := func(status int) func(req *admissionv1.AdmissionRequest) reply {
		return func(*admissionv1.AdmissionRequest) reply {
			return reply{status: status, contentType: ct("text/html; charset=utf-8"), location: redirectTarget}
		}
	}
	body := func(status int, contentType string, b []byte) func(*admissionv1.AdmissionRequest) reply {
		return func(*admissionv1.AdmissionRequest) reply {
			return reply{status: status, contentType: ct(contentType), body: b}
		}
	}
	envelope := func(apiVersion, kind string) func(req *admissionv1.AdmissionRequest) reply {
		return func(req *admissionv1.AdmissionRequest) reply {
			return reply{contentType: ct("application/json"), body: review(apiVersion, kind, allowed(req))}
		}
	}
	respond := func(f func(req *admissionv1.AdmissionRequest) map[string]any) func(req *admissionv1.AdmissionRequest) reply {
		return func(req *admissionv1.AdmissionRequest) reply { return okReply(f(req)) }
	}
	jsonPatch := "JSONPatch"

	return []variant{
		{name: "ct-json", group: "Content-Type", desc: "200, `application/json`, `allowed: true` (the baseline)", answer: allow},
		{name: "ct-json-params", group: "Content-Type", desc: "200, `application/json; charset=utf-8`", answer: withCT(ct("application/json; charset=utf-8"))},
		{name: "ct-absent", group: "Content-Type", desc: "200, no Content-Type header (as controller-runtime answers), JSON body", answer: withCT(nil)},
		{name: "ct-text-plain", group: "Content-Type", desc: "200, `text/plain; charset=utf-8`, JSON body", answer: withCT(ct("text/plain; charset=utf-8"))},
		{name: "ct-unparseable", group: "Content-Type", desc: "200, `application/json; =` (not a media type), JSON body", answer: withCT(ct("application/json; ="))},

		{name: "status-201", group: "Status code", desc: "201 with a valid allowing answer", answer: withStatus(http.StatusCreated)},
		{name: "status-204", group: "Status code", desc: "204, no body", answer: func(*admissionv1.AdmissionRequest) reply {
			return reply{status: http.StatusNoContent, contentType: ct("application/json")}
		}},
		{name: "status-302", group: "Status code", desc: "302 to a path that allows a POSTed review (a client follows with a bodiless GET, answered 400)", answer: redirect(http.StatusFound)},
		{name: "status-307", group: "Status code", desc: "307 to a path that allows a POSTed review (a client re-POSTs the body there)", answer: redirect(http.StatusTemporaryRedirect)},
		{name: "status-400", group: "Status code", desc: "400 with a valid allowing answer", answer: withStatus(http.StatusBadRequest)},
		{name: "status-500", group: "Status code", desc: "500, `text/plain` body", answer: body(http.StatusInternalServerError, "text/plain; charset=utf-8", []byte("internal error\n"))},
		{name: "status-503", group: "Status code", desc: "503, a `metav1.Status` body", answer: func(*admissionv1.AdmissionRequest) reply {
			return reply{status: http.StatusServiceUnavailable, contentType: ct("application/json"),
				body: []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"webhook overloaded","reason":"ServiceUnavailable","code":503}`)}
		}},

		{name: "body-empty", group: "Body", desc: "200, `application/json`, empty body", answer: body(http.StatusOK, "application/json", nil)},
		{name: "body-not-json", group: "Body", desc: "200, `application/json`, `this is not json{`", answer: body(http.StatusOK, "application/json", []byte("this is not json{"))},
		{name: "body-yaml", group: "Body", desc: "200, `application/yaml`, a valid allowing answer in YAML", answer: func(req *admissionv1.AdmissionRequest) reply {
			y, err := yaml.JSONToYAML(review("admission.k8s.io/v1", "AdmissionReview", allowed(req)))
			if err != nil {
				panic(err)
			}
			return reply{contentType: ct("application/yaml"), body: y}
		}},
		{name: "body-v1beta1", group: "Body", desc: "apiVersion `admission.k8s.io/v1beta1` (the request was v1)", answer: envelope("admission.k8s.io/v1beta1", "AdmissionReview")},
		{name: "body-unknown-version", group: "Body", desc: "apiVersion `example.com/v1`", answer: envelope("example.com/v1", "AdmissionReview")},
		{name: "body-wrong-kind", group: "Body", desc: "kind `AdmissionResponse`", answer: envelope("admission.k8s.io/v1", "AdmissionResponse")},
		{name: "body-no-typemeta", group: "Body", desc: "no apiVersion and no kind", answer: envelope("", "")},
		{name: "body-huge", group: "Body", desc: "a valid allowing answer padded with 3 MiB of JSON whitespace", answer: func(req *admissionv1.AdmissionRequest) reply {
			b := review("admission.k8s.io/v1", "AdmissionReview", allowed(req))
			huge := append(append([]byte("{"), bytes.Repeat([]byte(" "), hugePadding)...), b[1:]...)
			return reply{contentType: ct("application/json"), body: huge}
		}},

		{name: "uid-mismatch", group: "uid", desc: "`allowed: true` for another uid", answer: respond(func(req *admissionv1.AdmissionRequest) map[string]any {
			return with(allowed(req), "uid", "00000000-1111-2222-3333-444444444444")
		})},

		{name: "allowed-with-status", group: "allowed", desc: "`allowed: true` with a status (code 200, a message)", answer: respond(func(req *admissionv1.AdmissionRequest) map[string]any {
			return with(allowed(req), "status", map[string]any{"status": "Success", "code": 200, "message": "fine"})
		})},
		{name: "denied", group: "allowed", desc: "`allowed: false`, no status", answer: respond(func(req *admissionv1.AdmissionRequest) map[string]any {
			return with(allowed(req), "allowed", false)
		})},
		{name: "denied-with-status", group: "allowed", desc: "`allowed: false`, status 403 with a message", answer: respond(func(req *admissionv1.AdmissionRequest) map[string]any {
			return with(allowed(req), "allowed", false, "status", map[string]any{"status": "Failure", "code": 403, "reason": "Forbidden", "message": "not on my watch"})
		})},

		{name: "patch-jsonpatch", group: "Patch", desc: "a JSONPatch that adds a label", answer: respond(func(req *admissionv1.AdmissionRequest) map[string]any {
			return with(allowed(req), "patch", b64(addLabelPatch), "patchType", jsonPatch)
		})},
		{name: "patch-empty", group: "Patch", desc: "the empty JSONPatch `[]`", answer: respond(func(req *admissionv1.AdmissionRequest) map[string]any {
			return with(allowed(req), "patch", b64("[]"), "patchType", jsonPatch)
		})},
		{name: "patch-undecodable", group: "Patch", desc: "patchType JSONPatch, patch `not a patch`", answer: respond(func(req *admissionv1.AdmissionRequest) map[string]any {
			return with(allowed(req), "patch", b64("not a patch"), "patchType", jsonPatch)
		})},
		{name: "patch-unappliable", group: "Patch", desc: "a JSONPatch that decodes but does not apply (a failing `test`)", answer: respond(func(req *admissionv1.AdmissionRequest) map[string]any {
			return with(allowed(req), "patch", b64(`[{"op":"test","path":"/metadata/name","value":"not-this-name"}]`), "patchType", jsonPatch)
		})},
		{name: "patch-no-patchtype", group: "Patch", desc: "a JSONPatch without `patchType`", answer: respond(func(req *admissionv1.AdmissionRequest) map[string]any {
			return with(allowed(req), "patch", b64(addLabelPatch))
		})},
		{name: "patchtype-no-patch", group: "Patch", desc: "`patchType: JSONPatch` without a patch", answer: respond(func(req *admissionv1.AdmissionRequest) map[string]any {
			return with(allowed(req), "patchType", jsonPatch)
		})},
		{name: "patch-other-type", group: "Patch", desc: "a JSONPatch with `patchType: MergePatch`", answer: respond(func(req *admissionv1.AdmissionRequest) map[string]any {
			return with(allowed(req), "patch", b64(addLabelPatch), "patchType", "MergePatch")
		})},

		{name: "warnings", group: "Warnings", desc: "`allowed: true` with two warnings", answer: respond(func(req *admissionv1.AdmissionRequest) map[string]any {
			return with(allowed(req), "warnings", []string{"first warning", "second warning"})
		})},
		{name: "denied-warnings", group: "Warnings", desc: "`allowed: false` with a warning", answer: respond(func(req *admissionv1.AdmissionRequest) map[string]any {
			return with(allowed(req), "allowed", false, "warnings", []string{"you were warned"})
		})},

		{name: "slow-past-timeout", group: "Timeout", desc: "answers after 1.5 s; `timeoutSeconds: 1`", timeoutSeconds: 1, delay: 1500 * time.Millisecond, answer: allow},
		{name: "slow-within-timeout", group: "Timeout", desc: "answers after 1 s; `timeoutSeconds: 3`", timeoutSeconds: 3, delay: time.Second, answer: allow},

		{name: "tls-wrong-ca", group: "TLS", desc: "certificate from a CA other than the caBundle", listener: listenWrongCA, answer: allow},
		{name: "tls-expired", group: "TLS", desc: "certificate from the caBundle's CA, expired", listener: listenExpired, answer: allow},
		{name: "tls-wrong-name", group: "TLS", desc: "certificate from the caBundle's CA for `wrong-name.invalid` only (URL host 127.0.0.1)", listener: listenWrongName, answer: allow},
	}
}
