package cluster

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/testsignal"
)

// LockSession is one held liveness lock (membership.SessionLock).
type LockSession interface {
	Ping(ctx context.Context, timeout time.Duration) error
	Close()
}

// LockAcquirer takes the liveness lock with key for member on a connection
// of its own; it fails with membership.ErrLockHeld when the key is taken.
type LockAcquirer func(ctx context.Context, key int32) (LockSession, error)

// Defaults of the liveness lock: the session is checked every 250 ms with a
// 1 s deadline, so a member whose lock connection died or hangs stops
// claiming within about 1.25 s, before the server's keepalive (about 4 s,
// see membership.SessionLock) releases its lock and peers re-tile.
const (
	DefaultLockCheckEvery   = 250 * time.Millisecond
	DefaultLockCheckTimeout = time.Second
	DefaultProbeEvery       = 500 * time.Millisecond
)

// DefaultRetakeGrace is how long after re-taking a lost lock a member
// leaves its peers' missing locks alone (Settled): a database restart or
// failover ends every member's lock at once, and the peers take theirs back
// within a check of the database's return plus their reconnect, which with
// every process reconnecting at once took up to 3.6 s in the chaos suite.
const DefaultRetakeGrace = 5 * time.Second

// LivenessLock keeps this member's session advisory lock. Peers treat a
// member whose lock is not granted as dead (live_cluster_members), so a
// crashed process drops out as soon as its backend is gone. While the lock
// is not held the member must not claim: OnLost runs the moment a check
// fails (the host empties its ShardSet), Held reports false until the lock
// is re-taken, and OnHeld runs once it is (the host re-registers and
// re-tiles).
type LivenessLock struct {
	Acquire LockAcquirer
	Every   time.Duration // check cadence (default 250 ms)
	Timeout time.Duration // one check's deadline (default 1 s)
	OnLost  func()
	OnHeld  func()
	Log     zerolog.Logger
	Clock   engine.Clock // nil: the wall clock
	// RetakeGrace is how long Settled stays false after a re-take (default
	// DefaultRetakeGrace).
	RetakeGrace time.Duration

	TestSignals LivenessLockTestSignals

	mu   sync.Mutex
	sess LockSession
	key  atomic.Int32
	held atomic.Bool
	// retakenAt is when the lock was last re-taken after a loss (UnixNano on
	// Clock; 0 before the first loss).
	retakenAt atomic.Int64
}

// LivenessLockTestSignals report the lock's transitions to tests.
type LivenessLockTestSignals struct {
	// Held carries true when the lock is (re-)taken and false when lost.
	Held testsignal.Signal[bool]
}

// Init arms every signal.
func (ts *LivenessLockTestSignals) Init() { ts.Held.Init() }

// Name implements engine.Duty.
func (l *LivenessLock) Name() string { return "liveness-lock" }

// Held reports whether the lock is held (the member may claim).
func (l *LivenessLock) Held() bool { return l.held.Load() }

// Settled reports whether the lock is held and was not re-taken within the
// last RetakeGrace: the dead-member probe runs only then. A member whose
// own lock was just re-taken has most likely lost it with everyone else (a
// database restart, a failover), and a peer whose lock is still missing
// then is reconnecting, not dead: removing it would free the leases of the
// tasks it runs and re-tile every member twice.
func (l *LivenessLock) Settled() bool {
	if !l.Held() {
		return false
	}
	at := l.retakenAt.Load()
	if at == 0 {
		return true
	}
	grace := l.RetakeGrace
	if grace <= 0 {
		grace = DefaultRetakeGrace
	}
	return clockOf(l.Clock).Now().Sub(time.Unix(0, at)) >= grace
}

// Key is the lock's key, 0 before the first acquisition.
func (l *LivenessLock) Key() int32 { return l.key.Load() }

// maxKeyTries bounds the fresh keys tried on a collision.
const maxKeyTries = 8

// Take acquires the lock under a fresh random key, retrying another key on a
// collision; the host calls it at boot, before the member registers.
func (l *LivenessLock) Take(ctx context.Context) error {
	var err error
	for range maxKeyTries {
		key := membership.NewLockKey()
		var s LockSession
		if s, err = l.Acquire(ctx, key); err == nil {
			l.install(s, key)
			return nil
		}
		if !errors.Is(err, membership.ErrLockHeld) {
			return err
		}
	}
	return err
}

func (l *LivenessLock) install(s LockSession, key int32) {
	l.mu.Lock()
	l.sess = s
	l.mu.Unlock()
	l.key.Store(key)
	l.held.Store(true)
}

func (l *LivenessLock) session() LockSession {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sess
}

// Release ends the lock's session; the host calls it after deregistering,
// last, so peers never see the lock go before the member has left.
func (l *LivenessLock) Release() {
	l.held.Store(false)
	l.mu.Lock()
	s := l.sess
	l.sess = nil
	l.mu.Unlock()
	if s != nil {
		s.Close()
	}
}

// Run checks the session until ctx ends; on a failed check it gives the lock
// up at once and re-takes it with jittered backoff. It leaves the session
// open on return (see Release).
func (l *LivenessLock) Run(ctx context.Context) error {
	l.defaults()
	clock := clockOf(l.Clock)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-clock.After(l.Every):
		}
		s := l.session()
		if s == nil {
			l.retake(ctx, clock, clock.Now())
			continue
		}
		err := s.Ping(ctx, l.Timeout)
		if err == nil || ctx.Err() != nil {
			continue
		}
		lostAt := clock.Now()
		l.held.Store(false)
		if l.OnLost != nil {
			l.OnLost()
		}
		l.TestSignals.Held.Signal(false)
		l.Log.Warn().Err(err).Int32("lock_key", l.Key()).
			Msg("liveness lock session lost; stopped claiming until the lock is held again")
		s.Close()
		l.mu.Lock()
		l.sess = nil
		l.mu.Unlock()
		l.retake(ctx, clock, lostAt)
	}
}

func (l *LivenessLock) defaults() {
	if l.Every <= 0 {
		l.Every = DefaultLockCheckEvery
	}
	if l.Timeout <= 0 {
		l.Timeout = DefaultLockCheckTimeout
	}
}

// retake re-acquires the same key (the old backend may take until the
// server's keepalive to go), switching to a fresh key after repeated
// refusals, with jittered backoff from 100 ms up to the check's cadence
// (Every, 250 ms by default): the member claims and drains nothing until
// the lock is held again, so a longer cap would be time lost after the
// database's return (a 1 s cap overshot a 2–4 s restart by up to 1.25 s),
// and an attempt costs what a check of a held lock costs, one round trip
// (or one refused connect while the database is down). Failures are logged
// at debug: the loss was logged once, the return is logged once.
func (l *LivenessLock) retake(ctx context.Context, clock engine.Clock, lostAt time.Time) {
	backoff := 100 * time.Millisecond
	key, refused := l.Key(), 0
	if key == 0 {
		key = membership.NewLockKey()
	}
	for ctx.Err() == nil {
		s, err := l.Acquire(ctx, key)
		if err == nil {
			l.retakenAt.Store(clock.Now().UnixNano())
			l.install(s, key)
			l.Log.Info().Int32("lock_key", key).Dur("lost_for", clock.Now().Sub(lostAt)).
				Msg("liveness lock held again; resuming")
			l.TestSignals.Held.Signal(true)
			if l.OnHeld != nil {
				l.OnHeld()
			}
			return
		}
		if errors.Is(err, membership.ErrLockHeld) {
			if refused++; refused >= 20 {
				key, refused = membership.NewLockKey(), 0
			}
		}
		l.Log.Debug().Err(err).Int32("lock_key", key).Msg("liveness lock not re-taken yet")
		select {
		case <-ctx.Done():
			return
		case <-clock.After(jittered(backoff)):
		}
		backoff = min(2*backoff, max(l.Every, 100*time.Millisecond))
	}
}

// jittered is d ± 25 %.
func jittered(d time.Duration) time.Duration {
	return d*3/4 + time.Duration(rand.Int64N(int64(d)/2+1))
}

func clockOf(c engine.Clock) engine.Clock {
	if c == nil {
		return engine.RealClock
	}
	return c
}

// Reaper is the registry half the dead-member probe uses: it removes the
// members whose liveness lock is gone, judging only while the database shows
// selfKey, the caller's own lock, held (0: the caller holds none).
type Reaper interface {
	ReapUnlocked(ctx context.Context, selfKey int32) ([]string, error)
}

// DeadMemberProbe is the fast failure detector: every Every it removes the
// rows of members whose liveness lock is gone (reap_unlocked_cluster_members);
// each removal fires cluster_changed, so every member re-tiles at once. It
// skips while Held reports false: the host passes LivenessLock.Settled, false
// while this member's own lock is not held (it is likely cut off itself) and
// for a grace after it was re-taken (its peers are likely re-taking theirs).
// Key (LivenessLock.Key) goes with each probe: the lock can end after Held
// said it was held and before the probe reaches the database (a restart or
// failover not noticed yet), and the database then removes no one, since
// every peer's lock is likely gone with this member's.
// A failing probe is logged once per outage. Each removal is logged as a
// WARN naming this member (member_id, as every line of a member does) and
// the member removed (removed_member_id).
type DeadMemberProbe struct {
	ID       string // this member's id, for its log lines
	Registry Reaper
	Every    time.Duration // default 500 ms
	Held     func() bool   // nil: always probe
	Key      func() int32  // this member's lock key; nil: it holds none
	Outage   *engine.Outage
	Log      zerolog.Logger
	Clock    engine.Clock // nil: the wall clock

	failing bool
}

// Name implements engine.Duty.
func (p *DeadMemberProbe) Name() string { return "dead-member-probe" }

// Run probes until ctx ends.
func (p *DeadMemberProbe) Run(ctx context.Context) error {
	if p.Every <= 0 {
		p.Every = DefaultProbeEvery
	}
	clock := clockOf(p.Clock)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-clock.After(p.Every):
		}
		if p.Held == nil || p.Held() {
			p.probe(ctx)
		}
	}
}

func (p *DeadMemberProbe) probe(ctx context.Context) {
	var key int32
	if p.Key != nil {
		key = p.Key()
	}
	ids, err := p.Registry.ReapUnlocked(ctx, key)
	switch {
	case err != nil:
		if ctx.Err() == nil && !p.Outage.Failed("dead-member-probe", err) && !p.failing {
			p.failing = true
			p.Log.Warn().Err(err).Msg("dead-member probe failed; retrying quietly until it succeeds")
		}
		return
	case p.failing:
		p.failing = false
		p.Log.Info().Msg("dead-member probe succeeds again")
	}
	p.Outage.Succeeded()
	for _, id := range ids {
		p.Log.Warn().Str("member_id", p.ID).Str("removed_member_id", id).
			Msg("cluster member's liveness lock is gone (crashed or cut off); removed it, the role re-tiles")
	}
}
