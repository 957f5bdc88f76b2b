// Package intercept says which admission webhooks intercept webhook-guard's
// own requests: the writes the guard sends through admission, whose
// failure costs it something on the bad day (a policy engine's `*/*`
// webhook that hangs). They are the leader-election Lease, the Events it
// records, and the marking canary (a dry-run Event). Writes to webhook
// configurations are not among them: kube-apiserver never sends those to
// webhooks, so the write that opens a circuit is never intercepted.
//
// Glossary:
//   - A webhook intercepts a request when kube-apiserver calls it for that
//     request (its rules, namespaceSelector and objectSelector match, as
//     kube-apiserver matches them) and its failurePolicy is Fail, so that
//     its failure rejects the request.
//   - A webhook with matchConditions may intercept: they are CEL on the
//     request, which this package does not evaluate.
//
// What it must not do: talk to the API server, log, or decide anything
// about circuits. It is a pure function of the webhook configurations and
// the namespaces' labels, tested by a table.
package intercept
