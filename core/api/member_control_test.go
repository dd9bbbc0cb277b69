package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/membership"
)

// TestMemberControl_AdminDrainsAndKillsViewerAndUnknownAreRefused: the
// drain and kill mutations record the request with the token's actor and
// show it in the member's status; a viewer gets FORBIDDEN and an unknown id
// NOT_FOUND, and neither writes anything.
func TestMemberControl_AdminDrainsAndKillsViewerAndUnknownAreRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withTokens())
	members := membership.New(e.pool)
	for _, id := range []string{"broker-a", "broker-b"} {
		_, err := members.Upsert(e.ctx, membership.Member{ID: id, Role: membership.RoleBroker})
		require.NoError(t, err)
	}
	const drain = `mutation($id: ID!) { drainClusterMember(id: $id) { id status requestedAction requestedBy requestedAt shardLo } }`
	const kill = `mutation($id: ID!) { killClusterMember(id: $id) { id status requestedAction requestedBy } }`

	for name, q := range map[string]string{"drain": drain, "kill": kill} {
		r := e.do(viewerToken, q, map[string]any{"id": "broker-a"})
		require.Equal(t, "FORBIDDEN", r.code(), "a viewer may not %s: %+v", name, r.Errors)
		r = e.do(adminToken, q, map[string]any{"id": "broker-zz"})
		require.Equal(t, "NOT_FOUND", r.code(), "%s of an unknown id: %+v", name, r.Errors)
		require.Contains(t, r.Errors[0].Message, `"broker-zz"`, "the message names the id")
	}
	all, err := members.List(e.ctx)
	require.NoError(t, err)
	for _, m := range all {
		require.False(t, m.Request.Pending(), "a refused request wrote nothing: %+v", m)
	}

	var d struct {
		DrainClusterMember struct {
			ID, Status, RequestedAction, RequestedBy string
			RequestedAt                              *string
			ShardLo                                  *int
		}
	}
	e.ok(`mutation { drainClusterMember(id: "broker-a") { id status requestedAction requestedBy requestedAt shardLo } }`,
		nil, &d)
	require.Equal(t, "DRAINING", d.DrainClusterMember.Status)
	require.Equal(t, "DRAIN", d.DrainClusterMember.RequestedAction)
	require.Equal(t, "alice", d.DrainClusterMember.RequestedBy, "the actor is the admin token's name")
	require.NotNil(t, d.DrainClusterMember.RequestedAt)
	require.Nil(t, d.DrainClusterMember.ShardLo, "a draining member owns no shards")

	var k struct {
		KillClusterMember struct{ Status, RequestedAction string }
	}
	e.ok(`mutation { killClusterMember(id: "broker-a") { status requestedAction } }`, nil, &k)
	require.Equal(t, "KILLED", k.KillClusterMember.Status, "a kill escalates a drain")

	var l struct {
		ClusterMembers []struct {
			ID, Status  string
			RequestedBy *string
			ShardLo     *int
		}
	}
	e.ok(`{ clusterMembers { id status requestedBy shardLo } }`, nil, &l)
	require.Len(t, l.ClusterMembers, 2)
	require.Equal(t, "KILLED", l.ClusterMembers[0].Status)
	require.Equal(t, "READY", l.ClusterMembers[1].Status, "the other member is untouched")
	require.Nil(t, l.ClusterMembers[1].RequestedBy)
}
