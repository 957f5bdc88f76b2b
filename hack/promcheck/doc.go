// Package promcheck holds the tests that need Prometheus's own code
// (github.com/prometheus/prometheus), kept in the hack module so that
// Prometheus and its dependencies stay out of the product's go.mod:
//
//   - the PrometheusRule and the Grafana dashboard of
//     deploy/kustomize/components/prometheus, parsed with Prometheus's
//     rule and PromQL parsers, select only metrics the guard exposes;
//   - internal/apimetrics's histogram quantile answers what PromQL's
//     histogram_quantile answers;
//   - hack/tools/promtool builds promtool from the Prometheus this module
//     pins.
//
// It has no code besides its tests; make unit runs them ("go test ./..."
// in hack/). It must not be imported.
package promcheck
