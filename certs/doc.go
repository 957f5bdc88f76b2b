// Package certs owns TLS material for webhook-guard's own serving
// endpoint. It generates a CA and serving certificates. It keeps them in one
// Secret that all replicas share. It rotates the serving certificate before
// it expires, and it writes the certificate into the webhook server's CertDir
// so that the server reloads it without a restart. When a probed webhook fails
// on TLS, it also explains the cert-manager Certificate that feeds that
// webhook's caBundle (DiagnoseInjectedCA).
//
// It never changes the certificates of the webhooks the breaker probes;
// those belong to their owners, and it only reads their cert-manager
// Certificates. It reads and writes exactly one Secret, by name, with get,
// create and update. It never lists or watches Secrets.
//
// # Reload
//
// controller-runtime's webhook server serves CertDir/tls.crt and tls.key
// through a certwatcher. The certwatcher re-reads both files when fsnotify
// reports an event on either one. As a fallback it also re-reads them every
// 10 seconds (its default; the webhook server does not change it).
//
// The Manager lays CertDir out the way kubelet lays out a Secret volume:
// tls.crt and tls.key are links through a ..data link to a folder that
// holds the pair. To write a new pair, the Manager puts it in a new folder
// and then renames the ..data link to point at that folder, so the
// certificate and its key change in one step. It then removes the old
// folder. That removes the files the certwatcher watches, so the
// certwatcher re-reads at once and finds the whole new pair.
//
// A rotation made by this replica is therefore served within milliseconds;
// the reload test measures 2 to 12 ms. If file events are lost, it is served
// within 10 seconds. A rotation made by another replica, or by a person in
// the Secret, reaches this replica's CertDir at its next check, within
// Options.CheckInterval.
package certs
