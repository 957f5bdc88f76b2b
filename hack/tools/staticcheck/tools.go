//go:build tools

// Package tools pins staticcheck, the linter make lint runs, at the
// honnef.co/go/tools version in this go.mod. hack/tools/staticcheck.sh
// builds it from this module into the cache.
package tools

import _ "honnef.co/go/tools/cmd/staticcheck"
