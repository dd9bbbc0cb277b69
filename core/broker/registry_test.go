package broker

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/manifest"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// A freed slot goes to the oldest waiting stage, and a stage arriving while
// others wait queues behind them instead of taking the next slot.
func TestRegistryHandsSlotsToTheOldestWaiter(t *testing.T) {
	kv := manifest.KindVersion{Kind: "vpc", Version: "v1"}
	r := newRegistry(zerolog.Nop())
	s := &session{id: "a", maxIn: 1, ready: map[manifest.KindVersion]bool{kv: true}, done: make(chan struct{})}
	r.add(s)

	got, w := r.acquireOrWait(kv)
	if got != s || w != nil {
		t.Fatalf("first acquire: got %v, waiter %v; want the free slot", got, w)
	}
	_, w1 := r.acquireOrWait(kv)
	_, w2 := r.acquireOrWait(kv)
	if w1 == nil || w2 == nil {
		t.Fatal("a full worker handed out a second slot")
	}

	r.release(s)
	select {
	case x := <-w1.got:
		if x != s {
			t.Fatalf("w1 got session %v", x)
		}
	default:
		t.Fatal("the freed slot did not go to the oldest waiter")
	}
	select {
	case <-w2.got:
		t.Fatal("the younger waiter got a slot too")
	default:
	}

	// A slot freed while w2 waits is handed to w2 on release, so a newcomer
	// arriving after it finds none and queues.
	r.release(s)
	if got, w3 := r.acquireOrWait(kv); got != nil || w3 == nil {
		t.Fatalf("a newcomer took the slot ahead of a waiting stage (got %v)", got)
	} else {
		select {
		case <-w2.got:
		default:
			t.Fatal("w2 did not get the freed slot")
		}
		// A cancelled waiter gives back a slot handed to it meanwhile.
		r.release(s)
		r.cancelWait(w3)
		if n := r.capacity(kv); n != 1 {
			t.Fatalf("capacity after cancelling a served waiter = %d, want 1", n)
		}
	}
}

// A finished stage signals capacity, not a routing change; joins and
// readiness changes signal both, and the served kinds follow them.
func TestRegistrySignalsRoutingChangesApartFromCapacity(t *testing.T) {
	vpc := manifest.KindVersion{Kind: "vpc", Version: "v1"}
	tgw := manifest.KindVersion{Kind: "tgw", Version: "v1"}
	r := newRegistry(zerolog.Nop())
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}

	routes, capacity := r.routesChanged(), r.changed()
	s := &session{id: "a", maxIn: 2, ready: map[manifest.KindVersion]bool{vpc: true}, done: make(chan struct{})}
	r.add(s)
	if !closed(routes) || !closed(capacity) {
		t.Fatal("a worker joining is a routing and a capacity change")
	}
	if got := r.served(); len(got) != 1 || got[0] != vpc {
		t.Fatalf("served after the join = %v, want [vpc/v1]", got)
	}

	routes, capacity = r.routesChanged(), r.changed()
	got, _ := r.acquireOrWait(vpc)
	r.release(got)
	if closed(routes) {
		t.Fatal("a finished stage signalled a routing change")
	}
	if !closed(capacity) {
		t.Fatal("a finished stage did not signal capacity")
	}

	routes = r.routesChanged()
	r.setReady(s, []*workerv1.KindReadiness{
		{Kind: &workerv1.KindVersion{Kind: "vpc", Version: "v1"}, Ready: false},
		{Kind: &workerv1.KindVersion{Kind: "tgw", Version: "v1"}, Ready: true},
	})
	if !closed(routes) {
		t.Fatal("a readiness change did not signal a routing change")
	}
	if got := r.served(); len(got) != 1 || got[0] != tgw {
		t.Fatalf("served after the readiness change = %v, want [tgw/v1]: the cache was not refreshed", got)
	}
	if kvs := append(r.served(), vpc); len(r.served()) != 1 || len(kvs) != 2 {
		t.Fatal("appending to served() changed the registry's copy")
	}
}

// Every finished stage signals capacity, but a signal nobody is waiting for
// costs nothing: the channel is replaced only once someone took it, and
// whoever takes it is woken by the next release.
func TestRegistry_ASignalNobodyTookIsFree(t *testing.T) { //nolint:paralleltest // AllocsPerRun
	vpc := manifest.KindVersion{Kind: "vpc", Version: "v1"}
	r := newRegistry(zerolog.Nop())
	s := &session{id: "a", maxIn: 2, ready: map[manifest.KindVersion]bool{vpc: true}, done: make(chan struct{})}
	r.add(s)
	allocs := testing.AllocsPerRun(100, func() {
		got, _ := r.acquireOrWait(vpc)
		r.release(got)
	})
	if allocs != 0 {
		t.Fatalf("a release nobody waits for allocated %.0f times, want none", allocs)
	}

	capacity := r.changed()
	got, _ := r.acquireOrWait(vpc)
	select {
	case <-capacity:
		t.Fatal("capacity signalled before any release")
	default:
	}
	r.release(got)
	select {
	case <-capacity:
	default:
		t.Fatal("the release after the channel was taken did not close it")
	}
	_, serves := r.servesUntil(vpc)
	got, _ = r.acquireOrWait(vpc)
	r.release(got)
	select {
	case <-serves:
	default:
		t.Fatal("servesUntil's channel was not closed by the next release")
	}
}

// Once routing is closed (the broker has drained), no worker is ready for
// anything: not those connected, not one that says so again, not one that
// joins. A stage already running keeps its slot until it finishes, and
// idleUntil says when.
func TestRegistry_ClosedRoutingRoutesNothing(t *testing.T) {
	t.Parallel()
	kv := manifest.KindVersion{Kind: "vpc", Version: "v1"}
	r := newRegistry(zerolog.Nop())
	s := &session{id: "a", maxIn: 4, ready: map[manifest.KindVersion]bool{kv: true}, done: make(chan struct{})}
	r.add(s)
	if got, _ := r.acquireOrWait(kv); got != s {
		t.Fatal("an open registry routes to a ready worker")
	}
	routes := r.routesChanged()

	r.closeRouting()
	select {
	case <-routes:
	default:
		t.Fatal("closing routing is a routing change (a waiting stage looks again)")
	}
	if r.serves(kv) || r.capacity(kv) != 0 || len(r.served()) != 0 {
		t.Fatal("a closed registry still serves the kind")
	}
	r.setReady(s, []*workerv1.KindReadiness{{Kind: &workerv1.KindVersion{Kind: "vpc", Version: "v1"}, Ready: true}})
	late := &session{id: "b", maxIn: 4, ready: map[manifest.KindVersion]bool{kv: true}, done: make(chan struct{})}
	r.add(late)
	if got, w := r.acquireOrWait(kv); got != nil {
		t.Fatalf("a closed registry routed a stage to %s", got.id)
	} else {
		r.cancelWait(w)
	}

	idle, changed := r.idleUntil(s)
	if idle {
		t.Fatal("the running stage keeps its session busy")
	}
	r.release(s)
	select {
	case <-changed:
	default:
		t.Fatal("the finished stage did not signal")
	}
	if idle, _ := r.idleUntil(s); !idle {
		t.Fatal("the session ran its last stage")
	}
}

// A retired session is unready for good: its worker's readiness updates are
// ignored, the other sessions are untouched, and its running stage keeps its
// slot until released.
func TestRegistry_ARetiredSessionGetsNothingNew(t *testing.T) {
	t.Parallel()
	kv := manifest.KindVersion{Kind: "vpc", Version: "v1"}
	r := newRegistry(zerolog.Nop())
	old := &session{id: "old", maxIn: 4, ready: map[manifest.KindVersion]bool{kv: true}, done: make(chan struct{})}
	r.add(old)
	if got, _ := r.acquireOrWait(kv); got != old {
		t.Fatal("the only ready session takes the stage")
	}
	routes := r.routesChanged()
	r.retire(old, errSessionRetired)
	select {
	case <-routes:
	default:
		t.Fatal("retiring a session is a routing change")
	}
	r.setReady(old, []*workerv1.KindReadiness{{Kind: &workerv1.KindVersion{Kind: "vpc", Version: "v1"}, Ready: true}})
	if r.serves(kv) || r.retiredFor(old) == nil {
		t.Fatal("a retired session came back through a readiness update")
	}
	fresh := &session{id: "fresh", maxIn: 4, ready: map[manifest.KindVersion]bool{kv: true}, done: make(chan struct{})}
	r.add(fresh)
	if got, _ := r.acquireOrWait(kv); got != fresh {
		t.Fatalf("the stage went to %v, not the session that is not retired", got)
	}
	if idle, _ := r.idleUntil(old); idle {
		t.Fatal("the retired session's running stage keeps its slot")
	}
}
