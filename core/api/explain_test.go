package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A resource whose providerConfigRef names a config that does not exist is
// held by the gate, and Resource.waitingOn says so: the gate, and a message
// naming the config and what releases it.
func TestWaitingOn_NamesAMissingProviderConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.manifest(workerKind)
	e.apply("leaf", "held", `{}`)
	// A ref left dangling before the API and the keep-named trigger refused
	// that (nothing new can make one), its task not yet queued.
	for _, q := range []string{
		`INSERT INTO providerconfigs (kind, name, spec) VALUES ('leaf', 'gone', '{}')`,
		`UPDATE resources SET provider_config_ref = 'gone' WHERE name = 'held'`,
		`DELETE FROM providerconfigs WHERE kind = 'leaf' AND name = 'gone'`,
		`DELETE FROM work_queue WHERE resource_id = (SELECT id FROM resources WHERE name = 'held')`,
	} {
		_, err := e.pool.Exec(e.ctx, q)
		require.NoError(t, err, q)
	}
	var out struct {
		Resource struct {
			WaitingOn []struct{ Gate, Message string }
		}
	}
	e.ok(`{ resource(kind: "leaf", name: "held") { waitingOn { gate message } } }`, nil, &out)
	require.Len(t, out.Resource.WaitingOn, 1, "%+v", out.Resource.WaitingOn)
	require.Equal(t, "PROVIDER_CONFIG_MISSING", out.Resource.WaitingOn[0].Gate)
	require.Contains(t, out.Resource.WaitingOn[0].Message, "providerconfig leaf/gone, which providerConfigRef names, does not exist")
}
