// Package rbac renders the RBAC objects that depend on webhook-guard's
// configuration: the ClusterRole that lets the breaker write the target
// MutatingWebhookConfigurations, and nothing else, by name; and, in each
// namespace of a target's path probe Service, the Role and RoleBinding
// that let the path probe GET through kube-apiserver's service proxy to
// that Service, by name.
//
// The RBAC that does not depend on the configuration is static YAML in
// deploy/kustomize/base. This package only renders objects; it must not
// talk to the apiserver, and it must never render a rule without
// resourceNames, because an empty resourceNames list grants every name.
// A grant by name on a namespaced resource goes in a Role: a
// ClusterRole's resourceNames name no namespace.
package rbac
