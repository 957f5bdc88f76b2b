//go:build tools

// Package tools pins golangci-lint, the linter runner make lint runs with
// the repository's .golangci.yml, at the github.com/golangci/golangci-lint/v2
// version in this go.mod. hack/tools/golangci-lint.sh builds it from this
// module into the cache.
package tools

import _ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
