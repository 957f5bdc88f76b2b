// Package clustermetrics holds the guard's metrics that are no concern
// of the breaker: what binary runs (webhook_guard_build_info) and every
// webhook's timeoutSeconds in the cluster (webhook_guard_webhook_timeout_seconds),
// which the latency alert compares kube-apiserver's own histogram with.
// The breaker's metrics (internal/breaker, metrics.go) are about circuits.
package clustermetrics
