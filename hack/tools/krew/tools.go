//go:build tools

// Package tools pins krew (cmd/krew), the kubectl plugin manager that
// test/e2e/helm installs the released plugin with, from the release's
// manifest and archive into a temporary KREW_ROOT.
package tools

import _ "sigs.k8s.io/krew/cmd/krew"
