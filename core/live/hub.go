// Package live is the subscription hub: one per API pod, it bridges the
// Postgres change announcements to the GraphQL subscriptions.
//
// It LISTENs (through the process's one notify.Listener) on resource_changed
// and operation_changed (00004_announce.sql: coalesced per statement, never
// per row) and on cluster_changed; on each wake it re-reads the announced rows
// in one query, matches them against every subscriber's filter in memory and
// pushes the matching ones with a non-blocking send. The ids of a kind no
// subscriber could match are not even parsed, so with nobody watching a
// wake costs a look at each payload's head. Phase counts are
// recomputed (one query for every subscribed kind) at most once per
// CountsInterval and pushed only when they changed; the membership is
// re-listed on cluster_changed and every MemberPoll (liveness is derived from
// heartbeat age, which no NOTIFY announces) and pushed only when a member
// joined, left or changed status. Every SampleEvery the hub samples the work
// queue estimate and the phase totals into a bounded ring (Samples: the
// Summary's history at first paint, two catalog-cheap statements per sample
// whoever is watching).
//
// subtreeProgress (SubscribeSubtree) costs no query per change either: a
// followed root's subtree is loaded once (one read, shared by every
// subscriber of that root), then the rows re-read above are folded into it
// (a row belongs when its root or its owner does) and the counts are
// recomputed in memory, pushed at most once per CountsInterval; it is
// re-loaded only after a RESYNC. While any subtree is followed, every
// announced row is re-read (as for an unfiltered resourceChanged).
//
// The catalogs — kinds (kind_manifest_changed, kind_config_changed),
// provider configs (providerconfig_changed) and reactor bindings
// (reactor_binding_changed), one NOTIFY per statement — are re-listed once
// per distinct subscriber filter on each announcement and pushed whole to the
// subscribers whose last push differs (SubscribeKinds,
// SubscribeProviderConfigs, SubscribeReactorBindings).
//
// A NOTIFY is a hint, never the source of truth: after a dropped LISTEN
// connection (or a subscriber that fell behind, or a statement over the
// announcement cap) the affected resource subscribers get a RESYNC change and
// re-query, and counts, members and operations are re-read. A push that
// found a subscriber's buffer full (a RESYNC, the latest counts, catalog
// list or operation state) is retried every CountsInterval until it fits,
// so it does not wait for a further change that may never come; so is a
// re-read that failed (an operation's, the counts', a catalog's; a failed
// re-read of resources is a RESYNC, and a followed subtree's load is
// retried by its own pass). A re-read that fails is logged once per streak
// of failures (none while the database is unreachable: the process's Outage
// logs that once), however often it is retried.
//
// Wiring (cmd/converge):
//
//	listener := notify.NewListener(primaryPool, log)   // the process's one LISTEN connection
//	hub := live.NewHub(listener, readPool, log, live.WithPrimary(primaryPool))
//	go listener.Run(ctx)
//	go hub.Run(ctx)
//
// Subscribers call SubscribeResources, SubscribePhaseCounts, SubscribeMembers,
// SubscribeOperation, SubscribeSubtree and the catalog subscriptions with the
// subscription's context: the subscription
// ends (and its channel is closed) when that context is done.
package live

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/store/notify"
)

// The channels the hub LISTENs on.
const (
	ChannelResources  = "resource_changed"
	ChannelOperations = "operation_changed"
	ChannelCluster    = "cluster_changed"
)

// Options tune the hub; the zero value of each field means its default.
type Options struct {
	// Buffer is each subscriber's channel capacity (default 256). A
	// subscriber whose buffer is full loses changes and gets RESYNC.
	Buffer int
	// CountsInterval is the shortest gap between two phase-count
	// recomputations (default 250ms).
	CountsInterval time.Duration
	// MemberPoll is how often the membership is re-listed for status
	// changes (default 5s).
	MemberPoll time.Duration
	// Liveness is the heartbeat age past which a member is NOT_READY
	// (default membership.DefaultLiveness, 30s).
	Liveness time.Duration
	// Clock stamps samples, and member liveness only for a row read
	// without the database clock (default time.Now).
	Clock func() time.Time
	// SampleEvery is how often the Summary's sample (the queue estimate and
	// the phase totals) is taken (default 5s); SampleWindow how many are
	// kept (default 120: ten minutes).
	SampleEvery  time.Duration
	SampleWindow int
	// ReadTimeout bounds each of the hub's reads (default 30s): a read on
	// a connection whose network died without a reset would otherwise wait
	// forever, and every subscriber's pushes with it. One that times out
	// fails, and is retried as any failed read.
	ReadTimeout time.Duration
}

// Option sets an Option.
type Option func(*Hub)

// WithOptions sets the tunables.
func WithOptions(o Options) Option { return func(h *Hub) { h.opts = o } }

// WithDefaultLiveness sets the members' liveness window (the fleet's
// 3 × MEMBER_HEARTBEAT_EVERY) unless an earlier option set one.
func WithDefaultLiveness(d time.Duration) Option {
	return func(h *Hub) {
		if h.opts.Liveness <= 0 {
			h.opts.Liveness = d
		}
	}
}

// WithPrimary names the primary pool when readPool is a streaming replica:
// before each re-read the hub waits (briefly) until the replica has replayed
// what the primary had when the NOTIFY arrived, and reads from the primary
// when the replica lags longer.
func WithPrimary(primary *pgxpool.Pool) Option { return func(h *Hub) { h.primary = primary } }

// WithOutage reports re-reads that fail because the database is unreachable
// to o (logged once per outage for the process) instead of logging each.
func WithOutage(o *engine.Outage) Option { return func(h *Hub) { h.outage = o } }

// Hub fans Postgres change announcements out to subscribers.
type Hub struct {
	listener *notify.Listener
	read     *pgxpool.Pool
	primary  *pgxpool.Pool
	store    *store.Store
	members  *membership.Store
	log      zerolog.Logger
	opts     Options
	outage   *engine.Outage

	mu     sync.Mutex
	res    resourceIndex
	counts map[*countSub]struct{}
	mems   map[*memberSub]struct{}
	ops    map[opKey]map[*opSub]struct{}
	// cats are the kinds / provider configs / bindings subscribers;
	// catsFresh marks a catalog with a subscriber owed its first push.
	cats      [catalogCount]map[*catalogSub]struct{}
	catsFresh [catalogCount]bool
	// trees are the followed subtrees (subtreeProgress), by root.
	trees map[uuid.UUID]*tree
	// samples are the Summary's recent samples (Samples).
	samples sampleRing
	// owed are the subscribers a push could not reach (a full buffer):
	// Run retries every CountsInterval until each got what it is owed, so
	// a burst that was the last change still ends with them told.
	owed map[owedPush]struct{}

	// seen dedupes pushes of an unchanged row (Run's goroutine only).
	seen seenStates

	// failing are the re-reads failing now (see failed).
	failMu  sync.Mutex
	failing map[string]bool
	// reread are the reads that failed and are owed a retry (h.mu): Run
	// retries them every CountsInterval until they succeed, so what they
	// were to push does not wait for a further change.
	reread rereads

	// kick wakes Run when a subscriber arrives that needs a first read.
	kick chan struct{}
	// started is closed once Run has subscribed to its channels.
	started chan struct{}
}

// NewHub returns a hub that LISTENs through listener and re-reads from
// readPool (the replica when DATABASE_READ_URL is set, else the primary).
func NewHub(listener *notify.Listener, readPool *pgxpool.Pool, log zerolog.Logger, opts ...Option) *Hub {
	h := &Hub{
		listener: listener,
		read:     readPool,
		store:    store.New(readPool, readPool),
		members:  membership.New(readPool),
		log:      log.With().Str("component", "live").Logger(),
		res:      newResourceIndex(),
		counts:   map[*countSub]struct{}{},
		mems:     map[*memberSub]struct{}{},
		ops:      map[opKey]map[*opSub]struct{}{},
		trees:    map[uuid.UUID]*tree{},
		owed:     map[owedPush]struct{}{},
		failing:  map[string]bool{},
		reread:   rereads{ops: map[uuid.UUID]bool{}},
		kick:     make(chan struct{}, 1),
		started:  make(chan struct{}),
	}
	for c := range h.cats {
		h.cats[c] = map[*catalogSub]struct{}{}
	}
	for _, o := range opts {
		o(h)
	}
	if h.primary != nil && h.primary != h.read {
		// reads stay on the replica; the primary is there for the replay
		// probe and the fallback (PrimaryReads shares the kind cache)
		h.store = store.New(h.primary, h.read)
	}
	if h.opts.Buffer <= 0 {
		h.opts.Buffer = 256
	}
	if h.opts.CountsInterval <= 0 {
		h.opts.CountsInterval = 250 * time.Millisecond
	}
	if h.opts.MemberPoll <= 0 {
		h.opts.MemberPoll = 5 * time.Second
	}
	if h.opts.Liveness <= 0 {
		h.opts.Liveness = membership.DefaultLiveness
	}
	if h.opts.Clock == nil {
		h.opts.Clock = time.Now
	}
	if h.opts.SampleEvery <= 0 {
		h.opts.SampleEvery = 5 * time.Second
	}
	if h.opts.SampleWindow <= 0 {
		h.opts.SampleWindow = 120
	}
	if h.opts.ReadTimeout <= 0 {
		h.opts.ReadTimeout = 30 * time.Second
	}
	h.samples.buf = make([]Sample, 0, h.opts.SampleWindow)
	return h
}

// Run consumes the announcements until ctx ends. It never writes to the
// database and never blocks a writer: NOTIFY is queued by Postgres and this
// loop only reads.
func (h *Hub) Run(ctx context.Context) error {
	resC := h.listener.Subscribe(ChannelResources, 16384)
	defer resC.Close()
	opC := h.listener.Subscribe(ChannelOperations, 4096)
	defer opC.Close()
	clC := h.listener.Subscribe(ChannelCluster, 16)
	defer clC.Close()
	catC := h.subscribeCatalogs()
	defer func() {
		for _, s := range catC {
			s.Close()
		}
	}()
	close(h.started)

	memberTick := time.NewTicker(h.opts.MemberPoll)
	defer memberTick.Stop()
	sampleTick := time.NewTicker(h.opts.SampleEvery)
	defer sampleTick.Stop()
	h.sample(ctx)
	counts := newCoalescer(h.opts.CountsInterval)
	defer counts.stop()
	trees := newCoalescer(h.opts.CountsInterval)
	defer trees.stop()
	// retries: the owed pushes and the failed re-reads
	retries := newCoalescer(h.opts.CountsInterval)
	defer retries.stop()

	for {
		if h.OwedPushes() > 0 || h.rereadOwed() {
			retries.mark()
		}
		select {
		case <-ctx.Done():
			return nil
		case ev := <-resC.C:
			countsChanged, touched := h.onResources(ctx, resC, ev)
			if countsChanged {
				counts.mark()
			}
			if touched {
				trees.mark()
			}
		case ev := <-opC.C:
			h.onOperations(ctx, opC, ev)
		case <-clC.C:
			drain(clC, func(notify.Event) {})
			_ = clC.TakeLost()
			h.refreshMembers(ctx)
		case <-memberTick.C:
			h.refreshMembers(ctx)
		case <-sampleTick.C:
			h.sample(ctx)
		case <-counts.C():
			if counts.fire() {
				h.refreshCounts(ctx)
			}
		case <-trees.C():
			if trees.fire() && h.refreshTrees(ctx) {
				trees.mark()
			}
		case ev := <-catC[catKinds].C:
			h.onCatalog(ctx, catC[catKinds], ev, catKinds)
		case ev := <-catC[catalogCount].C: // kind_config_changed: the kinds catalog too
			h.onCatalog(ctx, catC[catalogCount], ev, catKinds)
		case ev := <-catC[catConfigs].C:
			h.onCatalog(ctx, catC[catConfigs], ev, catConfigs)
		case ev := <-catC[catBindings].C:
			h.onCatalog(ctx, catC[catBindings], ev, catBindings)
		case <-h.kick:
			counts.mark()
			trees.mark()
			h.refreshFreshCatalogs(ctx)
		case <-retries.C():
			if retries.fire() {
				h.retryOwed()
				h.retryReads(ctx)
			}
		}
	}
}

// rereads are the reads owed a retry: the operations whose re-read failed,
// the phase counts and the catalogs whose re-list did.
type rereads struct {
	ops    map[uuid.UUID]bool
	counts bool
	cats   [catalogCount]bool
}

// rereadOwed reports whether a read is owed a retry.
func (h *Hub) rereadOwed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := &h.reread
	return len(r.ops) > 0 || r.counts || r.cats != [catalogCount]bool{}
}

// retryReads retries the reads that failed (each failing again is owed
// again); an operation nobody follows any more is dropped.
func (h *Hub) retryReads(ctx context.Context) {
	h.mu.Lock()
	r := h.reread
	h.reread = rereads{ops: map[uuid.UUID]bool{}}
	var ops []uuid.UUID
	for id := range r.ops {
		if len(h.ops[id]) > 0 {
			ops = append(ops, id)
		}
	}
	h.mu.Unlock()
	h.recheckOps(ctx, ops)
	if r.counts {
		h.refreshCounts(ctx)
	}
	for c := range catalogCount {
		if r.cats[c] {
			h.refreshCatalog(ctx, c)
		}
	}
}

// owedPush is a subscriber a push could not reach: its buffer was full.
type owedPush interface {
	// retry sends what the subscriber is owed (a RESYNC, the latest counts,
	// list or operation state); it reports whether nothing is owed any more (delivered, or
	// the subscriber left). Called with h.mu held.
	retry() bool
}

// owe files s for a retry (h.mu held).
func (h *Hub) owe(s owedPush) { h.owed[s] = struct{}{} }

// retryOwed retries every owed push, from memory: nothing is re-read.
func (h *Hub) retryOwed() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.owed {
		if s.retry() {
			delete(h.owed, s)
		}
	}
}

// onResources handles a wake of resource_changed: ev and every
// announcement queued behind it, as one batch (see handleResources).
func (h *Hub) onResources(ctx context.Context, s *notify.Subscription, ev notify.Event) (counts, trees bool) {
	batch := newResourceBatch(h.wantsUpserts)
	batch.add(ev)
	drain(s, batch.add)
	if s.TakeLost() {
		batch.lost = true
	}
	return h.handleResources(ctx, batch)
}

// onOperations handles a wake of operation_changed, as onResources.
func (h *Hub) onOperations(ctx context.Context, s *notify.Subscription, ev notify.Event) {
	ob := newOpBatch()
	ob.add(ev)
	drain(s, ob.add)
	if s.TakeLost() {
		ob.all = true
	}
	h.handleOperations(ctx, ob)
}

// subscribeCatalogs LISTENs on the catalog channels: indexed by catalog,
// plus kind_config_changed (which refreshes the kinds) at catalogCount.
func (h *Hub) subscribeCatalogs() [catalogCount + 1]*notify.Subscription {
	var subs [catalogCount + 1]*notify.Subscription
	subs[catKinds] = h.listener.Subscribe(ChannelKindManifests, 1)
	subs[catConfigs] = h.listener.Subscribe(ChannelProviderConfigs, 1)
	subs[catBindings] = h.listener.Subscribe(ChannelReactorBindings, 1)
	subs[catalogCount] = h.listener.Subscribe(ChannelKindConfig, 1)
	return subs
}

// onCatalog re-lists a catalog after its announcement (or a reconnect).
func (h *Hub) onCatalog(ctx context.Context, s *notify.Subscription, _ notify.Event, c catalogKind) {
	drain(s, func(notify.Event) {})
	_ = s.TakeLost()
	h.mu.Lock()
	n := len(h.cats[c])
	h.mu.Unlock()
	if n > 0 {
		h.refreshCatalog(ctx, c)
	}
}

// coalescer arms a timer at most once per interval: mark asks for a run,
// C fires when it is due.
type coalescer struct {
	interval time.Duration
	timer    *time.Timer
	armed    bool
	dirty    bool
	last     time.Time
}

func newCoalescer(interval time.Duration) *coalescer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &coalescer{interval: interval, timer: t}
}

func (c *coalescer) C() <-chan time.Time { return c.timer.C }

func (c *coalescer) mark() {
	c.dirty = true
	if c.armed {
		return
	}
	c.timer.Reset(max(c.interval-time.Since(c.last), 0))
	c.armed = true
}

// fire consumes a due run; false when nothing was marked.
func (c *coalescer) fire() bool {
	c.armed = false
	if !c.dirty {
		return false
	}
	c.dirty, c.last = false, time.Now()
	return true
}

func (c *coalescer) stop() { c.timer.Stop() }

// drain hands every event already queued on s to f, without waiting.
func drain(s *notify.Subscription, f func(notify.Event)) {
	for {
		select {
		case ev := <-s.C:
			f(ev)
		default:
			return
		}
	}
}

// reader returns the store to re-read from: the read pool once it has
// replayed what the primary had at the wake, else the primary.
func (h *Hub) reader(ctx context.Context) *store.Store {
	if h.primary == nil || h.primary == h.read {
		return h.store
	}
	ok, err := h.store.WaitReplay(ctx, 500*time.Millisecond)
	switch {
	case err == nil:
		h.succeeded("replay")
	case !errors.Is(err, context.Canceled) && h.failed(ctx, "replay", err):
		h.log.Warn().Err(err).Msg("replica replay check failed; re-reading from the primary")
	}
	if !ok {
		return h.store.PrimaryReads()
	}
	return h.store
}

// failed reports whether a failed re-read is the hub's to log: not when ctx
// ended, not when the database is unreachable (the process's outage logs
// that once), and otherwise once per streak of failures of that read, so a
// read retried every CountsInterval does not log at every retry. read
// names the read ("subtree", "counts", …); succeeded ends its streak.
func (h *Hub) failed(ctx context.Context, read string, err error) bool {
	if ctx.Err() != nil || h.outage.Failed("hub-"+read, err) {
		return false
	}
	h.failMu.Lock()
	defer h.failMu.Unlock()
	if h.failing[read] {
		return false
	}
	h.failing[read] = true
	return true
}

// succeeded ends read's streak of failures (see failed).
func (h *Hub) succeeded(read string) {
	h.failMu.Lock()
	defer h.failMu.Unlock()
	delete(h.failing, read)
}

// bounded is ctx bounded by ReadTimeout, for one read (the callers keep
// ctx for telling a shutdown from a failure).
func (h *Hub) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, h.opts.ReadTimeout)
}

// Name names the hub as an engine duty (core/engine.Duty: Name + Run).
func (h *Hub) Name() string { return "live-hub" }

// Started is closed once Run has subscribed to the listener's channels (a
// listener started after it LISTENs on all of them before it is Ready).
func (h *Hub) Started() <-chan struct{} { return h.started }

// SubscriberCount reports the live subscriptions of each sort (for tests
// and metrics).
func (h *Hub) SubscriberCount() (resources, counts, members, operations int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.ops {
		operations += len(s)
	}
	return h.res.len(), len(h.counts), len(h.mems), operations
}

// OwedPushes reports how many subscribers are owed a push their full
// buffer refused, retried every CountsInterval (for tests and metrics).
func (h *Hub) OwedPushes() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.owed)
}

func (h *Hub) wake() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}
