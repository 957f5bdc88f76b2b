// Package breaker owns the circuit: the pure state machine that turns
// probe results into open and close decisions, the codec of the circuit
// record kept in the webhook-guard.io/circuit annotation, the pure edits
// that open, close and release a webhook, and the reconciler that writes
// them to MutatingWebhookConfigurations.
//
// Every transition is exactly one Update of the configuration, carrying a
// resourceVersion precondition, that changes the policy and the record
// together. The package keeps no other state store: after a crash or a
// failover everything is derived again from the objects. A webhook has a
// record entry if and only if the breaker's changes are in place.
//
// It must not change any field it does not own, and it must not decide
// whether a webhook may be skipped: that is the operator's approval in the
// configuration.
package breaker
