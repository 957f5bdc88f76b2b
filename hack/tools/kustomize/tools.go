//go:build tools

// Package tools pins kustomize for rendering deploy/kustomize in tests.
package tools

import _ "sigs.k8s.io/kustomize/kustomize/v5"
