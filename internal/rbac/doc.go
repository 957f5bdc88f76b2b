// Package rbac renders the RBAC objects that depend on webhook-guard's
// configuration: the ClusterRole that lets the breaker write the target
// MutatingWebhookConfigurations, and nothing else, by name.
//
// The RBAC that does not depend on the configuration is static YAML in
// deploy/kustomize/base. This package only renders objects; it must not
// talk to the apiserver, and it must never render a write rule without
// resourceNames, because an empty resourceNames list grants every name.
package rbac
