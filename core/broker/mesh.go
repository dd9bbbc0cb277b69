package broker

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/transport"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
	"github.com/converge-run/converge/workerproto/gen/converge/worker/v1/workerv1connect"
)

// The mesh: workers dial whichever broker their load balancer picks, but
// every broker claims its own shard range. A broker that claimed a task whose
// kind none of its own workers serves relays the stage to a live peer broker
// that has such a worker (RelayStage) and gets the completion back. Peers
// come from cluster_members (role broker or all, heartbeat inside the same
// liveness window shard tiling uses): their advertised BROKER_URL and the
// kinds their workers serve ready.

// peer is a live broker reachable over the mesh.
type peer struct {
	id     string
	url    string
	kinds  map[manifest.KindVersion]bool
	client workerv1connect.WorkerServiceClient
}

// Mesh is the topology reactor that keeps the peer set current.
type Mesh struct {
	Members  *membership.Store
	Self     string
	Liveness time.Duration
	// TLS is the client config for https:// peers (nil: system roots).
	TLS    *tls.Config
	broker *Broker

	peers atomic.Pointer[[]*peer]
	mu    sync.Mutex
	conns map[string]*peer // by url, reused across refreshes
	rr    atomic.Uint64
}

// Mesh returns the broker's mesh reactor (register it with the topology
// watcher so joins, leaves and crashes re-route within one liveness window).
func (b *Broker) Mesh(members *membership.Store, liveness time.Duration) *Mesh {
	b.init()
	if b.mesh == nil {
		b.mesh = &Mesh{Members: members, Self: b.ID, Liveness: liveness, broker: b, conns: map[string]*peer{}}
		empty := []*peer{}
		b.mesh.peers.Store(&empty)
	}
	return b.mesh
}

// Name implements cluster.Reactor.
func (m *Mesh) Name() string { return "mesh" }

// React re-reads the live brokers and their served kinds.
func (m *Mesh) React(ctx context.Context) error {
	live, err := m.Members.ListLive(ctx, m.Liveness)
	if err != nil {
		return err
	}
	var next []*peer
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mem := range live {
		if mem.ID == m.Self || (mem.Role != membership.RoleBroker && mem.Role != membership.RoleAll) {
			continue
		}
		var cfg map[string]any
		_ = json.Unmarshal(mem.Config, &cfg)
		url, _ := cfg["BROKER_URL"].(string)
		if url == "" {
			continue
		}
		p, ok := m.conns[url]
		if !ok || p.id != mem.ID {
			hc, err := transport.ClientFor(url, m.TLS)
			if err != nil {
				m.broker.Log.Warn().Err(err).Str("peer", mem.ID).Msg("unusable peer broker url")
				continue
			}
			p = &peer{id: mem.ID, url: url, client: workerv1connect.NewWorkerServiceClient(hc, url)}
			m.conns[url] = p
		}
		kinds := map[manifest.KindVersion]bool{}
		for _, k := range mem.Kinds {
			if kind, version, ok := strings.Cut(k, "/"); ok {
				kinds[manifest.KindVersion{Kind: kind, Version: version}] = true
			}
		}
		p.kinds = kinds
		next = append(next, &peer{id: p.id, url: p.url, kinds: kinds, client: p.client})
	}
	sort.Slice(next, func(i, j int) bool { return next[i].id < next[j].id })
	m.peers.Store(&next)
	m.broker.reg.notify() // peers' kinds may open pairs to claim
	return nil
}

// servedByPeers lists the kinds some live peer's workers serve.
func (m *Mesh) servedByPeers() map[manifest.KindVersion]bool {
	out := map[manifest.KindVersion]bool{}
	if m == nil {
		return out
	}
	for _, p := range *m.peers.Load() {
		for kv := range p.kinds {
			out[kv] = true
		}
	}
	return out
}

// pick round-robins the peers serving kv.
func (m *Mesh) pick(kv manifest.KindVersion) *peer {
	if m == nil {
		return nil
	}
	var cands []*peer
	for _, p := range *m.peers.Load() {
		if p.kinds[kv] {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[m.rr.Add(1)%uint64(len(cands))]
}

// errNoRoute means neither a local worker nor a peer serves the kind now.
var errNoRoute = errors.New("no worker serves this kind on this broker or its peers")

// relay sends one stage to a peer broker and returns the completion.
func (b *Broker) relay(ctx context.Context, kv manifest.KindVersion, task *workerv1.StageTask) (*workerv1.StageComplete, error) {
	p := b.mesh.pick(kv)
	if p == nil {
		return nil, errNoRoute
	}
	res, err := p.client.RelayStage(ctx, connect.NewRequest(&workerv1.RelayStageRequest{Task: task, OriginBroker: b.ID}))
	if err != nil {
		return nil, fmt.Errorf("relay %s stage to broker %s: %w", kv, p.id, err)
	}
	return res.Msg.GetComplete(), nil
}

// RelayStage runs a peer's stage on a local worker.
func (b *Broker) RelayStage(ctx context.Context, req *connect.Request[workerv1.RelayStageRequest]) (*connect.Response[workerv1.RelayStageResponse], error) {
	t := req.Msg.GetTask()
	if t.GetTaskId() == "" || t.GetResource() == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("relay needs a task with an id and a resource"))
	}
	kv := manifest.KindVersion{Kind: t.GetResource().GetKind(), Version: t.GetResource().GetVersion()}
	if !b.reg.serves(kv) {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("no worker on broker %s serves %s", b.ID, kv))
	}
	c, err := b.dispatchLocal(ctx, kv, t)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	if c == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("worker lost mid-stage and did not redeliver"))
	}
	return connect.NewResponse(&workerv1.RelayStageResponse{Complete: c}), nil
}
