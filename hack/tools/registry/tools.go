//go:build tools

// Package tools pins the CNCF distribution registry (cmd/registry), the
// OCI registry test/e2e/helm starts on loopback to "helm push" the
// released chart to and install it from with oci://.
package tools

import _ "github.com/distribution/distribution/v3/cmd/registry"
