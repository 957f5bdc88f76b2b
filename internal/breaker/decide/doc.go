// Package decide is the breaker's decision: pure functions from evidence
// to what the breaker does next.
//
// It holds the counts of consecutive probe outcomes (Counts), the judges
// (Judge, JudgeTarget, JudgeObserved), the plan that turns judgements into
// the next configuration and its changes (Plan), the takeover of another
// installation's entries (TakeOver), flap damping (Damp, Reopenings) and
// the wording of every Event it explains a change with.
//
// What this package must not do: talk to the API server, wait, read a
// clock, or export metrics. It imports no client, no context and no
// Prometheus, and never calls time.Now: the time of a decision is an
// input (Inputs.Now). TestImports_arePure checks this from the source, so
// that every decision can be tested as a table. Its callers, package
// breaker, gather the evidence and carry the decisions out.
package decide
