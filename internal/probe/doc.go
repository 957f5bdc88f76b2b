// Package probe reaches one admission webhook (mutating or validating) the
// way kube-apiserver does and classifies the outcome.
//
// It owns:
//   - turning a webhook's clientConfig into an address, a TLS configuration and
//     a URL (clientConfig.url as given, its host dialled as an absolute DNS
//     name, outside the pod's search path, as kube-apiserver's node resolver
//     finds it; clientConfig.service at the Service's ClusterIP with
//     ServerName <service>.<namespace>.svc, exactly like kube-apiserver's
//     ClusterIP service resolver);
//   - resolving Services from a watch of each Service (WatchingResolver):
//     once a Service has been resolved, no probe waits on an apiserver
//     request, and the last answer stands until the apiserver says the
//     Service changed or is gone;
//   - sending a single probe over a fresh connection: a dry-run
//     admission.k8s.io/v1 AdmissionReview, or a plain HTTP GET;
//   - verifying the response the way kube-apiserver verifies it;
//   - classifying the outcome as Healthy, Failed (with a FailureReason) or
//     Unknown (the guard itself could not tell, e.g. its own API lookups or
//     context failed; an Unknown result must never count as a failure);
//   - the path probe (PathProber): a GET through kube-apiserver's service
//     proxy, which travels the apiserver's own road to a service-backed
//     webhook, judged as that road's health, not the webhook's.
//
// It must not:
//   - write anything to the cluster (its only cluster access is the
//     list and watch of the targets' Services in WatchingResolver and the
//     path probe's GET through services/proxy);
//   - make a probe's verdict depend on an apiserver request about a
//     Service it has resolved before (under an outage such a request
//     waits in the apiserver's full seats, and the probe goes blind);
//   - decide anything about circuits, thresholds or failure policies: it only
//     reports outcomes, and callers decide what they mean;
//   - import any package of this repository but the circuit contract and
//     rulematch (kube-apiserver's rule matcher).
package probe
