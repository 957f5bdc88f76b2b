//go:build tools

// Package tools pins promtool, the Prometheus rule tester that make test
// runs on deploy/kustomize/components/prometheus/prometheusrule_test.yaml,
// at the github.com/prometheus/prometheus version of hack/go.mod.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
