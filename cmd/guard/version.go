package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version and commit are set at build time with -ldflags
// "-X main.version=... -X main.commit=..." (Makefile, Dockerfile).
var (
	version = "dev"
	commit  = "unknown"
)

func versionString() string {
	return fmt.Sprintf("webhook-guard %s (revision %s, %s)", version, revision(), runtime.Version())
}

// revision is commit, or else the VCS revision go build recorded.
func revision() string {
	rev := commit
	if rev != "unknown" && rev != "" {
		return rev
	}
	rev = "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	return rev
}
