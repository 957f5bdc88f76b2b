package harness

// WithoutMutatingAdmissionPolicy adds to flags (a new map when nil) the
// kube-apiserver flags of a cluster that does not serve
// MutatingAdmissionPolicy, as every cluster before Kubernetes 1.36: the API
// turned off by --runtime-config, and its admission plugin disabled too
// (it waits for informers of the API and would keep the apiserver from
// becoming ready).
func WithoutMutatingAdmissionPolicy(flags map[string]string) map[string]string {
	if flags == nil {
		flags = map[string]string{}
	}
	flags["runtime-config"] = "admissionregistration.k8s.io/v1/mutatingadmissionpolicies=false,admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings=false"
	flags["disable-admission-plugins"] = "MutatingAdmissionPolicy"
	return flags
}
