package unmutated

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli/clitest"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

func TestRefuseClearWhileOpen(t *testing.T) {
	cfg := &config.Configuration{Targets: []config.Target{{Kind: circuit.KindMutating, Configuration: clitest.Conf, Webhook: clitest.Hook}}}
	for name, tc := range map[string]struct {
		objs []client.Object
		want string
	}{
		"no configuration":             {nil, ""},
		"a closed circuit":             {[]client.Object{clitest.OpenConfiguration(t, nil, nil)}, ""},
		"another webhook's circuit":    {[]client.Object{clitest.OpenConfiguration(t, circuit.Record{"other.example.com": clitest.Entry(clitest.SAMain)}, nil)}, ""},
		"an open circuit, by anyone":   {[]client.Object{clitest.OpenConfiguration(t, circuit.Record{clitest.Hook: clitest.Entry(clitest.SAOther)}, nil)}, "webhook " + clitest.Hook + " (open since 2026-12-01T11:00:00Z)"},
		"a record that cannot be read": {[]client.Object{clitest.OpenConfiguration(t, nil, map[string]string{circuit.Annotation: "{"})}, "its circuit record cannot be read"},
	} {
		t.Run(name, func(t *testing.T) {
			err := refuseClearWhileOpen(context.Background(), clitest.FakeReader(tc.objs...), cfg)
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "refused, nothing was changed")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
