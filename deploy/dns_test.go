package deploy_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// TestDeployment_dottedNamesAreLookedUpAsWrittenFirst: the pod resolves a
// name with a dot as written before the cluster's search domains, as a
// node does, so that a tenant's Service "a" in a namespace "b" is not the
// first answer for a host a.b. The chart renders the same pod
// (TestChart_rendersWhatKustomizeInstalls).
func TestDeployment_dottedNamesAreLookedUpAsWrittenFirst(t *testing.T) {
	pod := managerPod(t)
	assert.Empty(t, pod.Spec.DNSPolicy, "ClusterFirst, the default, with the options below")
	require.NotNil(t, pod.Spec.DNSConfig)
	assert.Equal(t, []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("1")}}, pod.Spec.DNSConfig.Options)
	assert.Empty(t, pod.Spec.DNSConfig.Searches, "no search domain of its own")
}
