//go:build !failpoints

package breaker

// failpoint marks a point where the crash tests may kill the process. It
// does nothing here: only a build with -tags failpoints (see
// failpoint_on.go) can kill, never the default build.
func failpoint(string) {}
