// Package circuit is webhook-guard's circuit contract: the names it puts on
// webhook configurations, the record of what the breaker changed, and the
// facts that every reader of that record (the breaker, the Go rule, the
// rendered ValidatingAdmissionPolicy, the static webhook, guard status and
// the tests) reads out of it.
//
// Each fact is defined once here. The record's Go codec ([Decode],
// [Encode]) is what the breaker writes and reads; the [Fact] accessors read
// the same values out of the record's text, in Go ([Fact.Read]) and in CEL
// ([Fact.CEL]), with one regular expression, so the Go denial and the CEL
// denial cannot disagree about them.
//
// What this package must not do: talk to the API server, decide anything,
// or import another package of this module. It is the bottom of the graph.
package circuit
