package broker

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/transport"
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
	id    string
	url   string
	kinds map[manifest.KindVersion]bool
	// workers is the worker sessions the peer reported serving.
	workers int
	client  workerv1connect.WorkerServiceClient
}

// meshConn is the client of one peer's URL, kept across refreshes.
type meshConn struct {
	id     string
	http   *http.Client
	client workerv1connect.WorkerServiceClient
}

// liveMembers reads the live cluster membership.
type liveMembers interface {
	ListLive(ctx context.Context, liveness time.Duration) ([]membership.Member, error)
}

// Mesh is the topology reactor that keeps the peer set current.
type Mesh struct {
	Members  liveMembers
	Self     string
	Liveness time.Duration
	// TLS is the client config for https:// peers (nil: system roots).
	TLS *tls.Config
	// onChange is told after every refresh (peers' kinds may open pairs to
	// claim).
	onChange func()
	log      zerolog.Logger
	// clientOpts configure the peer clients (the mesh credential, limits).
	clientOpts []connect.ClientOption

	peers atomic.Pointer[[]*peer]
	mu    sync.Mutex
	conns map[string]*meshConn // by url and server name, reused across refreshes while the peer is live
	rr    atomic.Uint64
}

func newMesh(self string, onChange func(), log zerolog.Logger) *Mesh {
	m := &Mesh{Self: self, onChange: onChange, log: log, conns: map[string]*meshConn{}}
	empty := []*peer{}
	m.peers.Store(&empty)
	return m
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
	seen := make(map[string]bool, len(live))
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
		// BROKER_TLS_SERVER_NAME: the name its certificate is verified
		// against, for a URL by address (a pod IP) no certificate names.
		name, _ := cfg["BROKER_TLS_SERVER_NAME"].(string)
		key := url
		if name != "" {
			key += " " + name
		}
		c, ok := m.conns[key]
		if !ok || c.id != mem.ID {
			hc, err := transport.ClientFor(url, serverNamed(m.TLS, name))
			if err != nil {
				m.log.Warn().Err(err).Str("peer", mem.ID).Msg("unusable peer broker url")
				continue
			}
			if ok {
				c.http.CloseIdleConnections() // a new member at a dead one's address
			}
			c = &meshConn{id: mem.ID, http: hc, client: workerv1connect.NewWorkerServiceClient(hc, url, m.clientOpts...)}
			m.conns[key] = c
		}
		seen[key] = true
		kinds := map[manifest.KindVersion]bool{}
		for _, k := range mem.Kinds {
			if kind, version, ok := strings.Cut(k, "/"); ok {
				kinds[manifest.KindVersion{Kind: kind, Version: version}] = true
			}
		}
		next = append(next, &peer{id: c.id, url: url, kinds: kinds, workers: mem.Workers, client: c.client})
	}
	// The clients of peers no longer live go, with their idle connections:
	// every rolled pod is a new address, and a long-lived broker would keep
	// one client for each it ever saw. A relay still on its way finishes on
	// the connection it holds.
	for key, c := range m.conns {
		if !seen[key] {
			c.http.CloseIdleConnections()
			delete(m.conns, key)
		}
	}
	sort.Slice(next, func(i, j int) bool { return next[i].id < next[j].id })
	m.peers.Store(&next)
	m.onChange()
	return nil
}

// serverNamed is cfg verifying the server as name (cfg itself when name is
// empty; the system roots when cfg is nil).
func serverNamed(cfg *tls.Config, name string) *tls.Config {
	if name == "" {
		return cfg
	}
	if cfg == nil {
		return &tls.Config{MinVersion: tls.VersionTLS12, ServerName: name}
	}
	c := cfg.Clone()
	c.ServerName = name
	return c
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

// peerWorkers lists the number of workers each live peer reports.
func (m *Mesh) peerWorkers() []int {
	if m == nil {
		return nil
	}
	peers := *m.peers.Load()
	out := make([]int, len(peers))
	for i, p := range peers {
		out[i] = p.workers
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
