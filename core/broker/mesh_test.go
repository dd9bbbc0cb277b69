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
