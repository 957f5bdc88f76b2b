//go:build tools

// Package tools pins cyclonedx-gomod (cmd/cyclonedx-gomod), which "make
// release" runs to write the CycloneDX SBOM of each guard binary it builds.
package tools

import _ "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod"
