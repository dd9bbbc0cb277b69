// Package kinds is the process's live view of the applied kind manifests
// (CRDs): the broker learns which kinds to claim and which reaction to ship
// from it, with no compiled-in kind list. It is rebuilt on every
// kind_manifest_changed and kind_config_changed NOTIFY (a live policy edit
// changes no manifest) plus a failsafe re-read, so a manifest applied, or a
// policy edited, on one pod converges on every pod.
package kinds

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/notify"
)

// Lister reads every applied kind.
type Lister interface {
	ListKinds(ctx context.Context) ([]store.Kind, error)
}

// Snapshot is an immutable view of the applied kinds.
type Snapshot struct {
	byKV map[manifest.KindVersion]store.Kind
	list []store.Kind
}

// Get returns one (kind, version).
func (s *Snapshot) Get(kv manifest.KindVersion) (store.Kind, bool) {
	k, ok := s.byKV[kv]
	return k, ok
}

// All lists the kinds sorted by name and version.
func (s *Snapshot) All() []store.Kind { return s.list }

// Cache holds the current snapshot.
type Cache struct {
	lister   Lister
	listener *notify.Listener
	failsafe time.Duration
	log      zerolog.Logger

	cur     atomic.Pointer[Snapshot]
	mu      sync.Mutex
	changed []chan struct{}
	loaded  chan struct{}
	once    sync.Once
}

// New returns a cache; Run keeps it fresh. failsafe is the re-read cadence
// behind the NOTIFY (default 30s).
func New(lister Lister, listener *notify.Listener, failsafe time.Duration, log zerolog.Logger) *Cache {
	if failsafe <= 0 {
		failsafe = 30 * time.Second
	}
	c := &Cache{lister: lister, listener: listener, failsafe: failsafe, log: log.With().Str("component", "kind-cache").Logger(),
		loaded: make(chan struct{})}
	c.cur.Store(&Snapshot{byKV: map[manifest.KindVersion]store.Kind{}})
	return c
}

// Snapshot is the current view (empty before the first load).
func (c *Cache) Snapshot() *Snapshot { return c.cur.Load() }

// Loaded is closed after the first successful load.
func (c *Cache) Loaded() <-chan struct{} { return c.loaded }

// Changed returns a channel that receives (coalesced) after every reload that
// changed the snapshot.
func (c *Cache) Changed() <-chan struct{} {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	c.changed = append(c.changed, ch)
	c.mu.Unlock()
	return ch
}

// Reload re-reads every manifest now.
func (c *Cache) Reload(ctx context.Context) error {
	ks, err := c.lister.ListKinds(ctx)
	if err != nil {
		return err
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].Name != ks[j].Name {
			return ks[i].Name < ks[j].Name
		}
		return ks[i].Version < ks[j].Version
	})
	next := &Snapshot{byKV: make(map[manifest.KindVersion]store.Kind, len(ks)), list: ks}
	for _, k := range ks {
		next.byKV[manifest.KindVersion{Kind: k.Name, Version: k.Version}] = k
	}
	prev := c.cur.Swap(next)
	c.once.Do(func() { close(c.loaded) })
	if !sameGens(prev, next) {
		c.log.Debug().Int("kinds", len(ks)).Msg("kind manifests reloaded")
		c.mu.Lock()
		for _, ch := range c.changed {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		c.mu.Unlock()
	}
	return nil
}

func sameGens(a, b *Snapshot) bool {
	if len(a.list) != len(b.list) {
		return false
	}
	for i := range a.list {
		x, y := a.list[i], b.list[i]
		if x.Name != y.Name || x.Version != y.Version || x.ManifestGen != y.ManifestGen || x.Config != y.Config {
			return false
		}
	}
	return true
}

// Name implements engine.Duty.
func (c *Cache) Name() string { return "kind-cache" }

// Run reloads on every kind_manifest_changed and kind_config_changed wake
// (a manifest applied or deleted; a live policy edit, which changes no
// manifest) and every failsafe tick.
func (c *Cache) Run(ctx context.Context) error {
	var wake, policyWake <-chan notify.Event
	// nil once read again after the LISTEN
	var listening, policyListening <-chan struct{}
	if c.listener != nil {
		sub := c.listener.Subscribe("kind_manifest_changed", 1)
		defer sub.Close()
		policy := c.listener.Subscribe("kind_config_changed", 1)
		defer policy.Close()
		wake, listening = sub.C, sub.Listening()
		policyWake, policyListening = policy.C, policy.Listening()
	}
	var backoff engine.Backoff
	failing := false
	for {
		// A failed reload (the first read after a database restart) is
		// retried with backoff, not after the failsafe: the wake that would
		// have carried a change made meanwhile is gone. Logged once per
		// streak of failures.
		next := c.failsafe
		switch err := c.Reload(ctx); {
		case err != nil && ctx.Err() == nil:
			if !failing {
				c.log.Warn().Err(err).Msg("reload kind manifests failed; keeping the last view and retrying")
			}
			failing, next = true, backoff.Next()
		case err == nil && failing:
			c.log.Info().Msg("kind manifests reloaded again")
			failing, backoff = false, engine.Backoff{}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-policyWake:
		case <-listening:
			// The first read may have come before the LISTEN took effect, and
			// a manifest applied in between would wait for the failsafe
			// (30 s in converge): read again now that no change can slip by.
			listening = nil
		case <-policyListening:
			policyListening = nil
		case <-time.After(next):
		}
	}
}
