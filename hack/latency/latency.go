// Package latency is the request-latency table that hack/demo writes with
// -json and hack/bench reads.
package latency

// Case is one row of the table: ConfigMap creates through the Go client
// under one failure policy.
type Case struct {
	Case          string  `json:"case"`
	P50Ms         float64 `json:"p50Ms"`
	P95Ms         float64 `json:"p95Ms"`
	MaxMs         float64 `json:"maxMs"`
	RatioToHealth float64 `json:"p50RatioToHealthy"`
	Created       int     `json:"created"`
	Rejected      int     `json:"rejected"`
	WebhookCalls  int     `json:"webhookCalls"`
}
