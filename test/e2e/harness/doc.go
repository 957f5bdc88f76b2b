// Package harness starts the real control plane that webhook-guard's
// end-to-end tests and demo run against: kube-apiserver and etcd built from
// source (see hack/tools), started through controller-runtime's envtest,
// plus kubectl, kustomize, real ServiceAccount tokens and a TLS test
// webhook whose behaviour can be changed while it runs. It also holds
// what more than one e2e package needs to check: the circuit contract on
// a stored object (CheckInvariant, IsOpen) and the webhook they guard.
//
// It must not fake any part of the apiserver: everything it offers talks
// to the real processes it started.
package harness
