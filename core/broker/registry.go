// Package broker is the broker duty: it claims work_queue tasks in its
// shard range, runs each task's reconcile pipeline by fanning stages out over
// Connect to the database-free workers connected to it, fences every result
// on its claim_epoch and appends it to the transactional outbox. Workers dial
// in (WorkerService.WorkStream); the broker learns which kinds exist from the
// kind manifests, never from compiled-in code.
package broker

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/converge-run/converge/core/manifest"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// session is one connected worker.
type session struct {
	id       string
	workerID string
	holder   string // the lease holder: authenticated identity and worker id
	maxIn    int
	// compactRollups: the worker takes a rollup's subtree as columns.
	compactRollups bool
	// maxMsg is the largest message the session may be sent: the smaller
	// of the broker's limit and the worker's (Subscribe.max_message_bytes;
	// 0: no limit known).
	maxMsg int
	out    chan *workerv1.WorkStreamResponse // the stream's single sender drains it
	done   chan struct{}                     // closed when the stream ends

	// guarded by registry.mu
	ready    map[manifest.KindVersion]bool
	inFlight int
	// retired is why the session ends once idle (one of the planned ends,
	// errBrokerClosing, errSessionRetired or errSessionShed; nil while it
	// serves): unready for good. retiredCh, closed when it is retired, wakes
	// the session's endWhenDue (nil: nobody waits on it).
	retired   error
	retiredCh chan struct{}

	// configs is the revision of each kind's default config pushed to the
	// session (0: a deleted one); touched only by the config pusher's one
	// goroutine.
	configs map[string]int64

	// acks are the task ids of results to acknowledge, batched into one
	// ResultAck by the stream's sender (woken through ackWake).
	ackMu   sync.Mutex
	acks    []string
	ackWake chan struct{}
}

// ack queues the acknowledgement of the worker's result for taskID. An ack
// for a session that has ended is dropped: the worker redelivers the result
// on its next session, fenced by its claim_epoch.
func (s *session) ack(taskID string) {
	s.ackMu.Lock()
	s.acks = append(s.acks, taskID)
	s.ackMu.Unlock()
	select {
	case s.ackWake <- struct{}{}:
	default:
	}
}

// takeAcks returns the queued acks and clears the queue.
func (s *session) takeAcks() []string {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	out := s.acks
	s.acks = nil
	return out
}

// registry tracks connected workers and routes stages to them.
type registry struct {
	log      zerolog.Logger
	mu       sync.Mutex
	sessions map[string]*session
	// bcast is closed (and replaced) whenever capacity may have grown: a
	// worker joined, became ready, or finished a stage. It is replaced only
	// once someone has taken it (bcastTaken): every finished stage signals,
	// and between two looks of the dispatcher nobody else holds the
	// channel, so the others would each allocate one to close it unread.
	bcast      chan struct{}
	bcastTaken bool
	// routes is closed (and replaced) only when what can be served may have
	// changed: a worker joined, left or changed readiness, or the mesh's
	// peers changed — not at every finished stage.
	routes chan struct{}
	// servedKinds caches served() until the routes change (nil: stale).
	servedKinds []manifest.KindVersion
	// waiters are the stages waiting for a slot, oldest first: a freed slot
	// goes to the oldest waiter it can serve, so a task claimed a moment ago
	// never overtakes a stage that has been waiting.
	waiters []*slotWaiter
	// closed: the broker has drained; every session, and any that joins
	// later, is retired, so no stage is routed here any more
	// (closeRouting).
	closed bool
	// joins is signalled (buffered: one pending signal covers a burst)
	// when a session registers: the config pusher sends it the configs.
	joins chan struct{}
}

func newRegistry(log zerolog.Logger) *registry {
	return &registry{log: log, sessions: map[string]*session{}, bcast: make(chan struct{}), routes: make(chan struct{}),
		joins: make(chan struct{}, 1)}
}

// joined is signalled when a session registers (one reader: the config
// pusher).
func (r *registry) joined() <-chan struct{} { return r.joins }

// notify signals a capacity change (a slot freed).
func (r *registry) notify() {
	r.mu.Lock()
	r.signalLocked()
	r.mu.Unlock()
}

// signalLocked closes bcast for whoever took it. One nobody took since it
// was made has no reader to wake, and is left as it is.
func (r *registry) signalLocked() {
	if r.bcastTaken {
		close(r.bcast)
		r.bcast, r.bcastTaken = make(chan struct{}), false
	}
}

// bcastLocked hands out bcast, marking it taken.
func (r *registry) bcastLocked() <-chan struct{} {
	r.bcastTaken = true
	return r.bcast
}

// notifyRoutes signals a routing change, which is a capacity change too.
func (r *registry) notifyRoutes() {
	r.mu.Lock()
	r.signalLocked()
	close(r.routes)
	r.routes = make(chan struct{})
	r.servedKinds = nil
	r.mu.Unlock()
}

// changed returns a channel closed at the next capacity change.
func (r *registry) changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bcastLocked()
}

// routesChanged returns a channel closed at the next routing change.
func (r *registry) routesChanged() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.routes
}

// add registers s; connected, when set, is given the number of sessions
// now registered while the registry's lock is held (the workers gauge: a
// count set after the lock was released could land after a later
// session's, and stay wrong until the next connect).
func (r *registry) add(s *session, connected ...func(float64)) {
	r.mu.Lock()
	if r.closed {
		retireLocked(s, errBrokerClosing)
	}
	r.sessions[s.id] = s
	r.handOffLocked()
	for _, f := range connected {
		f(float64(len(r.sessions)))
	}
	r.mu.Unlock()
	r.notifyRoutes()
	select {
	case r.joins <- struct{}{}:
	default:
	}
}

// remove drops s and returns how many stages it held; connected is as for
// add.
func (r *registry) remove(s *session, connected ...func(float64)) int {
	r.mu.Lock()
	delete(r.sessions, s.id)
	n := s.inFlight
	for _, f := range connected {
		f(float64(len(r.sessions)))
	}
	r.mu.Unlock()
	r.notifyRoutes()
	return n
}

func (r *registry) setReady(s *session, kinds []*workerv1.KindReadiness) {
	r.mu.Lock()
	if s.retired != nil {
		r.mu.Unlock()
		return
	}
	s.ready = readyMap(kinds)
	r.handOffLocked()
	r.mu.Unlock()
	r.notifyRoutes()
}

// kindsOf is the kinds s serves or has said it serves (ready or not).
func (r *registry) kindsOf(s *session) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(s.ready))
	for kv := range s.ready {
		out = append(out, kv.Kind)
	}
	return out
}

func readyMap(kinds []*workerv1.KindReadiness) map[manifest.KindVersion]bool {
	m := make(map[manifest.KindVersion]bool, len(kinds))
	for _, k := range kinds {
		m[manifest.KindVersion{Kind: k.GetKind().GetKind(), Version: k.GetKind().GetVersion()}] = k.GetReady()
	}
	return m
}

// closeRouting retires every session, and any that joins later: the broker
// has drained, and nothing more is routed to its workers. What they run
// already (a peer's relayed stage) finishes. Waiting stages are woken to
// look again (a draining stager gives back a stage no ready worker serves).
func (r *registry) closeRouting() {
	r.mu.Lock()
	r.closed = true
	for _, s := range r.sessions {
		retireLocked(s, errBrokerClosing)
	}
	r.mu.Unlock()
	r.notifyRoutes()
}

// retire makes s unready for every kind, for good, for why (a planned end:
// its readiness updates are ignored from now on): nothing new is routed to
// it, and it ends once the stages it runs have finished. A session already
// retired keeps its first reason.
func (r *registry) retire(s *session, why error) {
	r.mu.Lock()
	retireLocked(s, why)
	r.mu.Unlock()
	r.notifyRoutes()
}

func retireLocked(s *session, why error) {
	if s.retired != nil {
		return
	}
	s.retired = why
	clear(s.ready)
	if s.retiredCh != nil {
		close(s.retiredCh)
	}
}

// workers is the number of sessions that are not retired: the workers this
// broker serves, as its membership row reports them.
func (r *registry) workers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.sessions {
		if s.retired == nil {
			n++
		}
	}
	return n
}

// shed retires up to n sessions to spread the workers over the brokers
// (errSessionShed) — those running the fewest stages, so they end soonest —
// and returns them.
func (r *registry) shed(n int) []*session {
	r.mu.Lock()
	var live []*session
	for _, s := range r.sessions {
		if s.retired == nil {
			live = append(live, s)
		}
	}
	sort.Slice(live, func(i, j int) bool {
		if live[i].inFlight != live[j].inFlight {
			return live[i].inFlight < live[j].inFlight
		}
		return live[i].id < live[j].id
	})
	out := live[:min(max(n, 0), len(live))]
	for _, s := range out {
		retireLocked(s, errSessionShed)
	}
	r.mu.Unlock()
	if len(out) > 0 {
		r.notifyRoutes()
	}
	return out
}

// retiredFor is why s was retired (nil: it was not).
func (r *registry) retiredFor(s *session) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return s.retired
}

// idleUntil reports whether s runs no stage, and the channel closed at the
// next capacity change after that answer (a finished stage is one).
func (r *registry) idleUntil(s *session) (bool, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return s.inFlight == 0, r.bcastLocked()
}

// slotWaiter is a stage waiting in acquireWait; got receives its reserved
// session (buffered: the hand-off never blocks the registry).
type slotWaiter struct {
	kv  manifest.KindVersion
	got chan *session
}

// acquireOrWait reserves a slot for kv at once — unless older stages that
// kv's workers could serve are waiting — or queues w for one.
func (r *registry) acquireOrWait(kv manifest.KindVersion) (*session, *slotWaiter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.queuedLocked(kv) {
		if s := r.pickLocked(kv); s != nil {
			s.inFlight++
			return s, nil
		}
	}
	w := &slotWaiter{kv: kv, got: make(chan *session, 1)}
	r.waiters = append(r.waiters, w)
	return nil, w
}

// queuedLocked reports whether a waiter for kv is queued.
func (r *registry) queuedLocked(kv manifest.KindVersion) bool {
	for _, w := range r.waiters {
		if w.kv == kv {
			return true
		}
	}
	return false
}

// cancelWait withdraws w; a slot already handed to it is given back.
func (r *registry) cancelWait(w *slotWaiter) {
	r.mu.Lock()
	for i, x := range r.waiters {
		if x == w {
			r.waiters = append(r.waiters[:i], r.waiters[i+1:]...)
			break
		}
	}
	r.mu.Unlock()
	select {
	case s := <-w.got:
		r.release(s)
	default:
	}
}

// handOffLocked gives free slots to the waiters, oldest first; a waiter no
// free slot can serve keeps its place.
func (r *registry) handOffLocked() {
	kept := r.waiters[:0]
	for _, w := range r.waiters {
		if s := r.pickLocked(w.kv); s != nil {
			s.inFlight++
			w.got <- s
			continue
		}
		kept = append(kept, w)
	}
	clear(r.waiters[len(kept):])
	r.waiters = kept
}

// pickLocked is the least-loaded ready worker for kv with a free slot.
func (r *registry) pickLocked(kv manifest.KindVersion) *session {
	var best *session
	for _, s := range r.sessions {
		if !s.ready[kv] || s.inFlight >= s.maxIn {
			continue
		}
		if best == nil || s.inFlight*best.maxIn < best.inFlight*s.maxIn { // least relative load
			best = s
		}
	}
	return best
}

func (r *registry) release(s *session) {
	r.mu.Lock()
	if s.inFlight > 0 {
		s.inFlight--
	}
	r.handOffLocked()
	r.mu.Unlock()
	r.notify()
}

// serves reports whether a connected worker serves kv ready.
func (r *registry) serves(kv manifest.KindVersion) bool {
	ok, _ := r.servesUntil(kv)
	return ok
}

// servesUntil is serves, and the channel closed at the next capacity change
// after its answer (one look: a worker that joins just after still closes
// it).
func (r *registry) servesUntil(kv manifest.KindVersion) (bool, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.sessions {
		if s.ready[kv] {
			return true, r.bcastLocked()
		}
	}
	return false, r.bcastLocked()
}

// capacity is the free slots of ready workers for kv.
func (r *registry) capacity(kv manifest.KindVersion) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.sessions {
		if s.ready[kv] {
			n += max(0, s.maxIn-s.inFlight)
		}
	}
	return n
}

// served lists the pairs at least one connected worker serves ready, sorted.
// It is computed once per routing change; callers must not modify it (an
// append copies: the slice is clipped).
func (r *registry) served() []manifest.KindVersion {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.servedKinds == nil {
		r.servedKinds = r.servedLocked()
	}
	return slices.Clip(r.servedKinds)
}

func (r *registry) servedLocked() []manifest.KindVersion {
	set := map[manifest.KindVersion]bool{}
	for _, s := range r.sessions {
		for kv, ok := range s.ready {
			if ok {
				set[kv] = true
			}
		}
	}
	out := make([]manifest.KindVersion, 0, len(set))
	for kv := range set {
		out = append(out, kv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// serving lists the sessions serving kind (ready or not), for config pushes.
func (r *registry) serving(kind string) []*session {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*session
	for _, s := range r.sessions {
		for kv := range s.ready {
			if kv.Kind == kind {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// configKinds lists the kinds local workers serve, ready or not, sorted: a
// worker often waits for its config to become ready.
func (r *registry) configKinds() []string {
	r.mu.Lock()
	set := map[string]bool{}
	for _, s := range r.sessions {
		for kv := range s.ready {
			set[kv.Kind] = true
		}
	}
	r.mu.Unlock()
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// count is the number of connected workers.
func (r *registry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}

// send queues a message for s, failing when its stream has ended.
func (s *session) send(ctx context.Context, m *workerv1.WorkStreamResponse) error {
	select {
	case s.out <- m:
		return nil
	case <-s.done:
		return errWorkerGone
	case <-ctx.Done():
		return ctx.Err()
	}
}

var errWorkerGone = errors.New("worker disconnected")

// errSessionBehind: a session's send queue stayed full for the wait.
var errSessionBehind = errors.New("the worker's send queue stayed full")

// sendWithin is send waiting for room in s's queue at most wait.
func (s *session) sendWithin(ctx context.Context, m *workerv1.WorkStreamResponse, wait time.Duration) error {
	select {
	case s.out <- m:
		return nil
	case <-s.done:
		return errWorkerGone
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case s.out <- m:
		return nil
	case <-s.done:
		return errWorkerGone
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return errSessionBehind
	}
}

// pushConfig sends push, revision rev of kind's default config, to every
// session serving kind (ready or not) that has not had that revision yet,
// and returns how many it sent it to. A session whose queue stays full for
// wait is skipped, so one slow worker never holds up the rest; it gets the
// revision at a later round.
func (r *registry) pushConfig(ctx context.Context, kind string, push *workerv1.ConfigPush, rev int64, wait time.Duration) int {
	n := 0
	msg := &workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Config{Config: push}}
	size := 0
	for _, s := range r.serving(kind) {
		if got, ok := s.configs[kind]; ok && got == rev {
			continue
		}
		if size == 0 {
			size = proto.Size(msg)
		}
		if s.maxMsg > 0 && size > s.maxMsg {
			// The worker would refuse the message and lose its session, at
			// every push: it is not sent, and the worker keeps the config
			// it has (its pull on the next reconnect fails the same way).
			r.log.Warn().Str("worker_id", s.workerID).Str("kind", kind).Int64("revision", rev).Int("bytes", size).
				Int("limit", s.maxMsg).Msg("default providerconfig too large for the worker's WORKER_MAX_MESSAGE_BYTES; not pushed")
			if s.configs == nil {
				s.configs = map[string]int64{}
			}
			s.configs[kind] = rev // warned once per revision
			continue
		}
		if err := s.sendWithin(ctx, msg, wait); err != nil {
			r.log.Debug().Err(err).Str("worker_id", s.workerID).Str("kind", kind).Msg("config push skipped; retried at the next round")
			continue
		}
		if s.configs == nil {
			s.configs = map[string]int64{}
		}
		s.configs[kind] = rev
		n++
	}
	return n
}
