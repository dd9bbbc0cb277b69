package pipeline

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// configOwner reads the owner of providerconfig kind/name; ok is false when
// there is no such config.
func (f *fx) configOwner(kind, name string) (owner *uuid.UUID, ok bool) {
	f.t.Helper()
	n := scalar[int](f, `SELECT count(*) FROM providerconfigs WHERE kind = $1 AND name = $2`, kind, name)
	if n == 0 {
		return nil, false
	}
	return scalar[*uuid.UUID](f, `SELECT owner_id FROM providerconfigs WHERE kind = $1 AND name = $2`, kind, name), true
}

// eventMessages reads id's events of reason, oldest first.
func (f *fx) eventMessages(id uuid.UUID, reason string) []string {
	f.t.Helper()
	rows, err := f.pool.Query(f.ctx, `SELECT type || ': ' || message FROM resource_events WHERE resource_id = $1 AND reason = $2 ORDER BY id`, id, reason)
	require.NoError(f.t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(f.t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(f.t, rows.Err())
	return out
}

// A config the composition stops emitting is kept, still the root's, while
// a resource names it — one outside the composition, or a pruned child
// still being torn down — with one Warning on the root naming them; a later
// compose deletes it once none does. Deleted under them, they would run
// (and be torn down) with their kind's default config, silently.
func TestCompose_KeepsAPrunedConfigWhileAResourceNamesIt(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t)
	root := task.Key.ResourceID
	withConfigs := Composition{
		Children: []Child{{Kind: "fin", Name: "final", ProviderConfigRef: "fin-cfg"}},
		Configs: []Config{{Kind: "app", Name: "app-cfg", Spec: json.RawMessage(`{"bucket":"b"}`)},
			{Kind: "fin", Name: "fin-cfg"}},
	}
	f.compose(task, withConfigs)
	final := f.childID("fin", "final")
	outside := f.res("app", "outside", configRef("app-cfg"))

	res := f.compose(task, Composition{})
	require.Equal(t, 1, res.Teardown)
	require.Zero(t, res.Configs, "no config is deleted: each is named")
	for _, name := range []string{"app/app-cfg", "fin/fin-cfg"} {
		kind, cfg, _ := strings.Cut(name, "/")
		owner, ok := f.configOwner(kind, cfg)
		require.True(t, ok, "%s is kept", name)
		require.Equal(t, &root, owner, "%s stays the root's", name)
	}
	require.Equal(t, []string{
		"Warning: providerconfig app/app-cfg is no longer emitted by this composition but 1 resource(s) name it (app/outside): it is kept until none does",
		"Warning: providerconfig fin/fin-cfg is no longer emitted by this composition but 1 resource(s) name it (fin/final): it is kept until none does",
	}, f.eventMessages(root, "ProviderConfigKept"))

	f.compose(task, Composition{})
	require.Len(t, f.eventMessages(root, "ProviderConfigKept"), 2, "warned once per prune, not at every compose")

	f.tearDownFinalized()
	require.False(t, f.exists(final))
	res = f.compose(task, Composition{})
	require.Equal(t, 1, res.Configs, "the torn-down child named fin-cfg last")
	_, ok := f.configOwner("fin", "fin-cfg")
	require.False(t, ok)
	require.Equal(t, []string{
		"Normal: providerconfig fin/fin-cfg, kept after this composition stopped emitting it, is deleted: no resource names it any more",
	}, f.eventMessages(root, "ProviderConfigDeleted"), "the root records that the config it kept is gone")
	_, ok = f.configOwner("app", "app-cfg")
	require.True(t, ok, "app/outside still names app-cfg")

	// Emitted again, it is the composition's again, and a new prune warns again.
	res = f.compose(task, Composition{Configs: withConfigs.Configs[:1]})
	require.Equal(t, 1, res.Configs)
	f.compose(task, Composition{})
	require.Len(t, f.eventMessages(root, "ProviderConfigKept"), 3)

	f.set(outside, `provider_config_ref = NULL`)
	res = f.compose(task, Composition{})
	require.Equal(t, 1, res.Configs)
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM providerconfigs`))
}

// A root's configs go with it, but one a resource outside its tree names is
// handed over instead: it stays, hand-authored (no owner), and each resource
// naming it records a Warning saying so. Its delete is then the user's, and
// refused while anything names it.
func TestRootDeletion_HandsAConfigOthersNameToThem(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t)
	root := task.Key.ResourceID
	f.compose(task, Composition{
		Children: []Child{{Kind: "fin", Name: "final"}},
		Configs:  []Config{{Kind: "app", Name: "shared"}, {Kind: "app", Name: "private"}, {Kind: "app", Name: "fleet"}},
	})
	outside := f.res("app", "outside", configRef("shared"))
	f.exec(`INSERT INTO resources (id, kind, version, name, spec, shard_id, provider_config_ref)
	        SELECT id, 'app', 'v1', 'fleet-' || lpad(g::text, 3, '0'), '{}', shard_of(id), 'fleet'
	          FROM (SELECT gen_random_uuid() AS id, g FROM generate_series(1, 101) g) x`)

	f.exec(`SELECT request_resource_deletion($1)`, root)
	f.tearDownFinalized()
	require.False(t, f.exists(root))

	owner, ok := f.configOwner("app", "shared")
	require.True(t, ok, "app/outside names it")
	require.Nil(t, owner, "handed over: hand-authored now")
	_, ok = f.configOwner("app", "private")
	require.False(t, ok, "named by none, it went with its root")
	require.Equal(t, []string{
		"Warning: providerconfig app/shared, which this resource names, was owned by composition root " + root.String() +
			", which is deleted: it is kept as a hand-authored config for the 1 resource(s) that name it",
	}, f.eventMessages(outside, "ProviderConfigReleased"))

	// A config a fleet names warns the first 100 of it by name, not each.
	_, ok = f.configOwner("app", "fleet")
	require.True(t, ok)
	require.Equal(t, 100, scalar[int](f, `
SELECT count(*) FROM resource_events e JOIN resources r ON r.id = e.resource_id
 WHERE e.reason = 'ProviderConfigReleased' AND r.name LIKE 'fleet-%' AND r.name < 'fleet-101'
   AND e.message LIKE '%for the 101 resource(s) that name it'`))
	require.Zero(t, scalar[int](f, `
SELECT count(*) FROM resource_events e JOIN resources r ON r.id = e.resource_id
 WHERE e.reason = 'ProviderConfigReleased' AND r.name = 'fleet-101'`))
}
