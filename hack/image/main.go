// Command image builds, pushes and describes the guard's container image
// the way ko does, with go-containerregistry and without a container
// daemon: "make release" (hack/release.sh) runs it.
//
//	image build -layout DIR -version V -revision R -platform linux/amd64=BIN ...
//	    writes a multi-arch OCI image index, one image per -platform, into
//	    the OCI layout DIR, and prints the index's digest
//	image push -layout DIR -to REPOSITORY[:TAG]
//	    pushes the index in the layout DIR, and prints REPOSITORY@DIGEST
//	image sbom -layout DIR -repository R -out FILE BINARY_SBOM ...
//	    writes the CycloneDX SBOM of the index from the SBOMs of the
//	    binaries it holds (cyclonedx-gomod bin)
//
// Each image is one layer on scratch: the guard binary as /guard, and the
// Mozilla root certificates that golang.org/x/crypto/x509roots/fallback
// pins as /etc/ssl/certs/ca-certificates.crt, where Go's crypto/x509 looks
// on linux (a probe of a webhook with a url and no caBundle verifies
// against the system roots). It runs as 65532:65532, with the entrypoint
// and arguments of the Dockerfile. Every timestamp is the Unix epoch, so
// the same binaries give the same digest.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: image build|push|sbom [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = runBuild(os.Args[2:])
	case "push":
		err = runPush(os.Args[2:])
	case "sbom":
		err = runSBOM(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want build, push or sbom", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}
