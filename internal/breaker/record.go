package breaker

import (
	"encoding/json"
	"fmt"
	"sort"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/webhook-guard/webhook-guard/internal/config"
)

// Names on the MutatingWebhookConfiguration; they are the contract with
// users and with the guard's admission rule.
const (
	// CircuitAnnotation holds the Record.
	CircuitAnnotation = "webhook-guard.io/circuit"
	// OverrideAnnotation, with a non-empty reason, hands a configuration to
	// its administrator.
	OverrideAnnotation = "webhook-guard.io/override"
	// BypassCondition names the matchCondition added in Bypass mode.
	BypassCondition = "webhook-guard.io/circuit-open"
)

// Record is the circuit record, keyed by webhook name. An entry exists if
// and only if the breaker's changes to that webhook are in place.
type Record map[string]Entry

// Entry is what the breaker changed on one webhook and why.
type Entry struct {
	// UID is the configuration's UID when the circuit opened. An entry
	// with another UID is a stale copy, not the breaker's.
	UID types.UID `json:"uid"`
	// Mode is the mode the circuit opened in.
	Mode config.Mode `json:"mode"`
	// OpenedAt is when the circuit opened.
	OpenedAt metav1.Time `json:"openedAt"`
	// Reason is the failure reason of the last probe before opening.
	Reason string `json:"reason"`
	// OriginalFailurePolicy is the failurePolicy before opening; null
	// means it was unset.
	OriginalFailurePolicy *admissionregistrationv1.FailurePolicyType `json:"originalFailurePolicy"`
}

// DecodeRecord reads the record from annotations. A missing annotation is
// an empty record. A malformed one is an error: the breaker will not guess
// what it changed.
func DecodeRecord(annotations map[string]string) (Record, error) {
	raw, ok := annotations[CircuitAnnotation]
	if !ok {
		return Record{}, nil
	}
	rec := Record{}
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return nil, fmt.Errorf("annotation %s is not a circuit record: %w", CircuitAnnotation, err)
	}
	if rec == nil {
		return nil, fmt.Errorf("annotation %s is not a circuit record: %q", CircuitAnnotation, raw)
	}
	return rec, nil
}

// EncodeRecord writes rec into annotations (which it allocates if nil) and
// returns them. An empty record removes the annotation.
func EncodeRecord(annotations map[string]string, rec Record) (map[string]string, error) {
	if len(rec) == 0 {
		delete(annotations, CircuitAnnotation)
		return annotations, nil
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return annotations, fmt.Errorf("encoding circuit record: %w", err)
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[CircuitAnnotation] = string(data)
	return annotations, nil
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
