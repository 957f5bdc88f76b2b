// Package status is the contract between "guard run", which serves GET
// /status, and "guard status", which reads it: the row type (the JSON
// both sides speak), the handler, how a request is authenticated, and
// where a reader finds the server (the leader's Lease, the pod's port).
// It reads the breaker's in-memory state and changes nothing.
package status
