// Command guard wires webhook-guard together: flags, configuration,
// the controller-runtime manager, the breaker and the guard. It holds no
// decision logic of its own.
package main
