// Package run is "guard run": the service. It validates its flags and
// configuration before anything reaches the cluster, makes the start
// checks (internal/cli/startcheck), and starts a controller-runtime
// manager with the breaker, the guard policy check, the guard's
// webhook, the certificate rotation and GET /status (internal/status). It
// wires those together and decides nothing of its own.
package run
