package circuit

import (
	"encoding/json"
	"fmt"
	"sort"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Record is the value of Annotation: the breaker's entries keyed by
// webhook name. An entry exists if and only if the breaker's changes to
// that webhook are in place.
type Record map[string]Entry

// Entry is what the breaker changed on one webhook and why. Its values
// never contain '}' or '"', so the Fact accessors can find them in the
// encoded text.
type Entry struct {
	// UID is the configuration's UID when the circuit opened. An entry
	// with another UID is a stale copy, not the breaker's.
	UID types.UID `json:"uid"`
	// Mode is the mode the circuit opened in.
	Mode Mode `json:"mode"`
	// OpenedAt is when the circuit opened, to the second.
	OpenedAt metav1.Time `json:"openedAt"`
	// Reason is the failure reason of the last failing observation before
	// opening: a probe's, or "apiserver-calls" for the apiserver signal.
	Reason string `json:"reason"`
	// Signal is what opened the circuit: "probe", "apiserver" (kube-
	// apiserver's own calls failed) or "probe+apiserver". Empty in entries
	// written before the apiserver signal existed.
	Signal string `json:"signal,omitempty"`
	// OriginalFailurePolicy is the failurePolicy before opening; null
	// means it was unset.
	OriginalFailurePolicy *admissionregistrationv1.FailurePolicyType `json:"originalFailurePolicy"`
	// By is the identity of the breaker that opened the circuit. An entry
	// by another identity belongs to another installation and is left
	// alone; an entry without one (written before this field) is taken as
	// this installation's.
	By string `json:"by,omitempty"`
	// HandedOffAt is when an administrator's override annotation took the
	// configuration over while the circuit was open. The entry stays, with
	// its original, until a write puts that original back: the breaker's
	// closing once the override is gone, a release, or an administrator.
	HandedOffAt *metav1.Time `json:"handedOffAt,omitempty"`
}

// HandedOff reports whether the entry was handed off (HandedOffAt).
func (e Entry) HandedOff() bool { return e.HandedOffAt != nil }

// Mine reports whether the entry was written by identity.
func (e Entry) Mine(identity string) bool { return e.By == "" || e.By == identity }

// Mine returns hook's entry when identity wrote it (Entry.Mine), and
// whether it did.
func (r Record) Mine(hook, identity string) (Entry, bool) {
	e, ok := r[hook]
	return e, ok && e.Mine(identity)
}

// Decode reads the record from a configuration's annotations. A missing
// annotation is an empty record. A malformed one is an error: nobody may
// guess what the breaker changed.
func Decode(annotations map[string]string) (Record, error) {
	return decode(annotations, Annotation)
}

// Encode writes rec into annotations (allocating them if nil) and returns
// them. An empty record removes the annotation.
func Encode(annotations map[string]string, rec Record) (map[string]string, error) {
	return encode(annotations, Annotation, rec)
}

// DecodeArming reads the entries of ArmingAnnotation, as Decode reads
// the record.
func DecodeArming(annotations map[string]string) (Record, error) {
	return decode(annotations, ArmingAnnotation)
}

// EncodeArming writes ArmingAnnotation, as Encode writes the record.
func EncodeArming(annotations map[string]string, armed Record) (map[string]string, error) {
	return encode(annotations, ArmingAnnotation, armed)
}

func decode(annotations map[string]string, key string) (Record, error) {
	raw, ok := annotations[key]
	if !ok {
		return Record{}, nil
	}
	rec := Record{}
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return nil, fmt.Errorf("annotation %s is not a circuit record: %w", key, err)
	}
	if rec == nil {
		return nil, fmt.Errorf("annotation %s is not a circuit record: %q", key, raw)
	}
	return rec, nil
}

func encode(annotations map[string]string, key string, rec Record) (map[string]string, error) {
	if len(rec) == 0 {
		delete(annotations, key)
		return annotations, nil
	}
	text, err := rec.Text()
	if err != nil {
		return annotations, err
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[key] = text
	return annotations, nil
}

// Text is the annotation value for rec: compact JSON with sorted keys.
func (r Record) Text() (string, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("encoding circuit record: %w", err)
	}
	return string(data), nil
}

// Webhooks returns the record's webhook names, sorted.
func (r Record) Webhooks() []string {
	out := make([]string, 0, len(r))
	for name := range r {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// PolicyString renders a failurePolicy for people: "unset" for nil.
// Every message of webhook-guard, in Go and in CEL, renders it this way.
func PolicyString(p *admissionregistrationv1.FailurePolicyType) string {
	if p == nil || *p == "" {
		return Unset
	}
	return string(*p)
}

// Unset is how a failurePolicy that is not set is rendered.
const Unset = "unset"
