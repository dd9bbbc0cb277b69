package broker

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/membership"
)

type fakeMembers struct {
	ListLiveFn func(ctx context.Context, liveness time.Duration) ([]membership.Member, error)
}

func (f *fakeMembers) ListLive(ctx context.Context, liveness time.Duration) ([]membership.Member, error) {
	return f.ListLiveFn(ctx, liveness)
}

func member(id, role, url string, kinds ...string) membership.Member {
	cfg, _ := json.Marshal(map[string]any{"BROKER_URL": url})
	return membership.Member{ID: id, Role: role, Kinds: kinds, Config: cfg}
}

// The mesh's peers are the live brokers other than this one that advertise
// a URL; a stage for a kind goes round-robin to the peers serving it.
func TestMeshReact_PeersAreLiveBrokersWithAURL(t *testing.T) {
	t.Parallel()
	changed := 0
	m := newMesh("self", func() { changed++ }, testLog(t))
	m.Liveness = 15 * time.Second
	m.Members = &fakeMembers{ListLiveFn: func(_ context.Context, liveness time.Duration) ([]membership.Member, error) {
		require.Equal(t, 15*time.Second, liveness)
		return []membership.Member{
			member("self", membership.RoleAll, "http://127.0.0.1:1", "vpc/v1"),
			member("b", membership.RoleBroker, "http://127.0.0.1:2", "vpc/v1", "subnet/v1"),
			member("c", membership.RoleAll, "http://127.0.0.1:3", "vpc/v1"),
			member("ctl", membership.RoleControl, "http://127.0.0.1:4", "vpc/v1"),
			member("nourl", membership.RoleBroker, "", "vpc/v1"),
		}, nil
	}}
	require.NoError(t, m.React(context.Background()))
	require.Equal(t, 1, changed, "every refresh tells the dispatcher routes may have changed")

	vpc, subnet := manifest.KindVersion{Kind: "vpc", Version: "v1"}, manifest.KindVersion{Kind: "subnet", Version: "v1"}
	require.Equal(t, map[manifest.KindVersion]bool{vpc: true, subnet: true}, m.servedByPeers())
	picked := map[string]int{}
	for range 4 {
		picked[m.pick(vpc).id]++
	}
	require.Equal(t, map[string]int{"b": 2, "c": 2}, picked, "vpc stages alternate between the two peers serving it")
	require.Equal(t, "b", m.pick(subnet).id)
	require.Nil(t, m.pick(manifest.KindVersion{Kind: "route", Version: "v1"}))
}

// A peer's client is kept while the peer is live, and goes once it is not
// (every rolled pod is a new address); each peer's reported workers are
// read with it.
func TestMeshReact_KeepsClientsOfLivePeersOnly(t *testing.T) {
	t.Parallel()
	m := newMesh("self", func() {}, testLog(t))
	var live []membership.Member
	m.Members = &fakeMembers{ListLiveFn: func(context.Context, time.Duration) ([]membership.Member, error) { return live, nil }}
	b, c := member("b", membership.RoleBroker, "http://127.0.0.1:2", "vpc/v1"), member("c", membership.RoleBroker, "http://127.0.0.1:3", "vpc/v1")
	b.Workers, c.Workers = 3, 1
	live = []membership.Member{b, c}
	require.NoError(t, m.React(context.Background()))
	require.Len(t, m.conns, 2)
	kept := m.conns["http://127.0.0.1:2"]
	require.ElementsMatch(t, []int{3, 1}, m.peerWorkers())

	live = []membership.Member{b} // c died
	require.NoError(t, m.React(context.Background()))
	require.Len(t, m.conns, 1, "the dead peer's client is gone")
	require.Same(t, kept, m.conns["http://127.0.0.1:2"], "the live peer's client is reused")
	require.Equal(t, []int{3}, m.peerWorkers())

	d := member("d", membership.RoleBroker, "http://127.0.0.1:2", "vpc/v1") // a new pod at b's address
	live = []membership.Member{d}
	require.NoError(t, m.React(context.Background()))
	require.NotSame(t, kept, m.conns["http://127.0.0.1:2"], "a new member at an old address gets a client of its own")
	require.Equal(t, "d", m.pick(manifest.KindVersion{Kind: "vpc", Version: "v1"}).id)
}
