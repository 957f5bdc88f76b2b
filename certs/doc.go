// Package certs owns TLS material for webhook-guard's own serving
// endpoint: it generates a CA and serving certificates. It never touches
// the certificates of the webhooks the breaker probes; those belong to
// their owners.
package certs
