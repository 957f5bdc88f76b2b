package helm

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestChart_serviceAccountValues: serviceAccount.name renames the guard's
// ServiceAccount everywhere the chart names it (the Deployment, every
// binding, the FlowSchema, the guard policy's exempt identity, the release
// hook's --breaker and its own account, <name>-release); create=false
// renders none; annotations go on the one rendered.
func TestChart_serviceAccountValues(t *testing.T) {
	const ns = "webhook-guard-system"
	render := func(t *testing.T, set string) (map[string]object, string) {
		out := helmTemplate(t, "--namespace", ns, "--set", set)
		return byKey(t, parseObjects(t, out)), out
	}
	t.Run("a name of its own, everywhere", func(t *testing.T) {
		objs, out := render(t, "serviceAccount.name=guard-sa,serviceAccount.annotations.iam\\.example\\.com/role=guard")
		sa := objs["ServiceAccount "+ns+"/guard-sa"]
		require.NotNil(t, sa)
		assert.Equal(t, object{"iam.example.com/role": "guard"}, sa["metadata"].(object)["annotations"])
		assert.NotContains(t, objs, "ServiceAccount "+ns+"/webhook-guard")
		assert.Contains(t, objs, "ServiceAccount "+ns+"/guard-sa-release")
		pod := objs["Deployment "+ns+"/webhook-guard"]["spec"].(object)["template"].(object)["spec"].(object)
		assert.Equal(t, "guard-sa", pod["serviceAccountName"])
		bound := 0
		for k, obj := range objs {
			subjects, _ := obj["subjects"].([]any)
			for _, s := range subjects {
				s := s.(object)
				if s["kind"] == "ServiceAccount" {
					assert.NotEqual(t, "webhook-guard", s["name"], "%s binds the default name", k)
					assert.NotEqual(t, "webhook-guard-release", s["name"], "%s binds the default release name", k)
					if s["name"] == "guard-sa" {
						bound++
					}
				}
			}
		}
		assert.GreaterOrEqual(t, bound, 7, "the guard's Roles and ClusterRoles are bound to guard-sa")
		fs := objs["FlowSchema /webhook-guard"]["spec"].(object)["rules"].([]any)[0].(object)["subjects"].([]any)[0].(object)
		assert.Equal(t, "guard-sa", fs["serviceAccount"].(object)["name"])
		assert.NotContains(t, out, "system:serviceaccount:"+ns+":webhook-guard", "no identity of the default name is left")
		assert.Contains(t, out, "'system:serviceaccount:"+ns+":guard-sa'", "the guard policy exempts the named account")
		assert.Contains(t, out, "--breaker=system:serviceaccount:"+ns+":guard-sa")
	})
	t.Run("create=false renders no ServiceAccount of the guard", func(t *testing.T) {
		objs, _ := render(t, "serviceAccount.create=false,serviceAccount.name=platform-guard")
		for k := range objs {
			if strings.HasPrefix(k, "ServiceAccount ") {
				// The release hook's, the status reader's and the helm test Pod's.
				assert.Contains(t, []string{"ServiceAccount " + ns + "/platform-guard-release", "ServiceAccount " + ns + "/webhook-guard-status-reader", "ServiceAccount " + ns + "/webhook-guard-test"}, k)
			}
		}
		pod := objs["Deployment "+ns+"/webhook-guard"]["spec"].(object)["template"].(object)["spec"].(object)
		assert.Equal(t, "platform-guard", pod["serviceAccountName"])
	})
	t.Run("the default is webhook-guard, without annotations", func(t *testing.T) {
		objs, _ := render(t, "replicas=2")
		sa := objs["ServiceAccount "+ns+"/webhook-guard"]
		require.NotNil(t, sa)
		assert.NotContains(t, sa["metadata"], "annotations")
	})
}
