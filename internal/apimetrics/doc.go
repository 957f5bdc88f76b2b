// Package apimetrics reads kube-apiserver's own record of the admission
// webhook calls it makes, from its /metrics, and turns it into one
// observation per webhook and interval: the breaker's second health
// signal, beside the direct probe.
//
// It owns the scrape (one request for every target together, bounded in
// time and size), the parse (only the families it needs, with the
// Prometheus text parser) and the arithmetic (counter deltas per
// apiserver instance, resets, the failure ratio). It decides nothing about
// circuits and imports nothing of this module: the breaker feeds its
// observations to the same counters as the probe's.
package apimetrics
