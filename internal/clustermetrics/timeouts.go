package clustermetrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// DefaultWebhookTimeout is timeoutSeconds when a webhook does not set it
// (admissionregistration.k8s.io/v1 defaults it to 10).
const DefaultWebhookTimeout = 10 * time.Second

const webhookTimeoutHelp = "timeoutSeconds of every webhook of every Mutating and ValidatingWebhookConfiguration in the cluster, managed or not, " +
	"to compare kube-apiserver's apiserver_admission_webhook_admission_duration_seconds with (its name label is the webhook label here)."

var webhookTimeoutDesc = prometheus.NewDesc("webhook_guard_webhook_timeout_seconds", webhookTimeoutHelp,
	[]string{"kind", "configuration", "webhook"}, nil)

// WebhookTimeouts is a prometheus.Collector that reports
// webhook_guard_webhook_timeout_seconds for every webhook in the cluster.
// It lists both configuration kinds from Reader, the manager's cache, at
// each scrape, so it is always current and costs nothing between scrapes.
// kube-apiserver's metrics do not carry a webhook's timeout; this gauge is
// what the latency alert compares the p99 with.
type WebhookTimeouts struct {
	// Reader lists the configurations: the manager's cache, which the
	// breaker's controllers already fill with both kinds.
	Reader client.Reader
	// ListTimeout bounds one listing (a scrape before the cache synced
	// waits for it); default 5s.
	ListTimeout time.Duration
}

var _ prometheus.Collector = (*WebhookTimeouts)(nil)

// Describe implements prometheus.Collector.
func (w *WebhookTimeouts) Describe(ch chan<- *prometheus.Desc) { ch <- webhookTimeoutDesc }

// Collect implements prometheus.Collector. A listing that fails (the cache
// not started yet) reports nothing for that kind rather than failing the
// whole scrape.
func (w *WebhookTimeouts) Collect(ch chan<- prometheus.Metric) {
	timeout := w.ListTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	log := logf.Log.WithName("webhook-timeouts")
	emit := func(kind circuit.Kind, configuration, webhook string, seconds *int32) {
		t := DefaultWebhookTimeout.Seconds()
		if seconds != nil {
			t = float64(*seconds)
		}
		ch <- prometheus.MustNewConstMetric(webhookTimeoutDesc, prometheus.GaugeValue, t, string(kind), configuration, webhook)
	}
	var mutating admissionregistrationv1.MutatingWebhookConfigurationList
	if err := w.Reader.List(ctx, &mutating); err != nil {
		log.V(1).Info("Listing MutatingWebhookConfigurations for the timeout gauge failed", "error", err.Error())
	} else {
		for _, c := range mutating.Items {
			for _, wh := range c.Webhooks {
				emit(circuit.KindMutating, c.Name, wh.Name, wh.TimeoutSeconds)
			}
		}
	}
	var validating admissionregistrationv1.ValidatingWebhookConfigurationList
	if err := w.Reader.List(ctx, &validating); err != nil {
		log.V(1).Info("Listing ValidatingWebhookConfigurations for the timeout gauge failed", "error", err.Error())
	} else {
		for _, c := range validating.Items {
			for _, wh := range c.Webhooks {
				emit(circuit.KindValidating, c.Name, wh.Name, wh.TimeoutSeconds)
			}
		}
	}
}
