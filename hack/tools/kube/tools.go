//go:build tools

// Package tools pins kube-apiserver and kubectl for the e2e control plane.
// It is a separate module so that k8s.io/kubernetes never enters the
// project's own dependency graph.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
