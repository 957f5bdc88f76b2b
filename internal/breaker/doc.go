// Package breaker owns the circuit: the pure state machine that turns
// probe results into open and close decisions (Judge, JudgeTarget, Plan), the probe
// runner that feeds it, and the reconciler that writes its decisions to
// Mutating- and ValidatingWebhookConfigurations (seen through
// circuit.View). The names and the record it writes belong to package
// circuit.
//
// Every transition is exactly one JSON patch of the owned fields, carrying
// the resourceVersion it read, that changes the policy and the record
// together. The package keeps no other state store: after a crash or a
// failover everything is derived again from the objects. A webhook has a
// record entry if and only if the breaker's changes are in place.
//
// It must not change any field it does not own, and it must not decide
// whether a webhook may be skipped: that is the operator's approval in the
// configuration.
package breaker
