package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/testsignal"
)

// Registry is the membership store the reporter and watcher use.
type Registry interface {
	Upsert(ctx context.Context, m membership.Member) (time.Time, error)
	Deregister(ctx context.Context, id string) (bool, error)
	AssignShards(ctx context.Context, id string, total int, liveness time.Duration) (shard.Range, error)
}

// Reporter registers this process in cluster_members and beats every
// Every: one primary-key upsert stamped by the database clock, carrying the
// live in-flight count and shard span. On stop it deletes its own row as the
// last step, on a fresh 5 s context so a wedged network cannot hang exit.
type Reporter struct {
	Registry Registry
	ID       string
	Role     string
	Version  string
	Config   map[string]any
	Every    time.Duration
	// Liveness is the window peers judge the beats by (0: 3 × Every): a
	// beat landing after a longer silence announces the member's return
	// (membership.Member.Liveness).
	Liveness time.Duration
	// Kinds, Shards, InFlight and Workers are read on every beat (may be
	// nil).
	Kinds    func() []string
	Shards   *ShardSet
	InFlight func() int
	Workers  func() int
	// Lock is the member's liveness lock (nil: none). Its key is written on
	// every beat, and no beat is sent while it is not held: a row without
	// its lock would be reaped again at once.
	Lock   *LivenessLock
	Outage *engine.Outage // nil: a failed beat is logged
	Log    zerolog.Logger
	Clock  engine.Clock // nil: the wall clock
	// OnRegistered runs after the first beat lands (the row exists), e.g.
	// the topology watcher's Kick: the member's own cluster_changed may
	// reach its listener before that listens, and the range must not wait
	// for the watcher's poll.
	OnRegistered func()

	TestSignals ReporterTestSignals

	started  time.Time
	initOnce sync.Once
	beaten   chan struct{}
	kick     chan struct{}
	// rejoin: the next beat that lands is a return after a lost liveness
	// lock, and wakes the peers (Member.Rejoin).
	rejoin atomic.Bool
}

// ReporterTestSignals report the reporter's beats to tests.
type ReporterTestSignals struct {
	// Beat carries each beat's outcome (nil when the upsert landed).
	Beat testsignal.Signal[error]
}

// Init arms every signal.
func (ts *ReporterTestSignals) Init() { ts.Beat.Init() }

func (r *Reporter) init() {
	r.initOnce.Do(func() {
		r.beaten = make(chan struct{})
		r.kick = make(chan struct{}, 1)
	})
}

// Kick beats now (for instance right after a re-tile, so the cluster view
// shows the new range without waiting for the next beat).
func (r *Reporter) Kick() {
	r.init()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// NewMemberID returns a member id unique to this process.
func NewMemberID(role string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%s-%d-%d", role, host, os.Getpid(), time.Now().UnixNano()%1_000_000)
}

// Beaten is closed after the first successful beat (the member is registered).
func (r *Reporter) Beaten() <-chan struct{} {
	r.init()
	return r.beaten
}

// Rejoin beats now and makes that beat (or, if it fails, the next one that
// lands) wake the peers: the member holds its liveness lock again, and peers
// that re-tiled while it was counted out must hear it is back even though
// its row never went away.
func (r *Reporter) Rejoin() {
	r.rejoin.Store(true)
	r.Kick()
}

// Name implements engine.Duty.
func (r *Reporter) Name() string { return "member-reporter" }

// Run beats until ctx ends; it does not deregister (see Deregister), so the
// host can order deregistration after everything else has stopped.
func (r *Reporter) Run(ctx context.Context) error {
	if r.Every <= 0 {
		r.Every = 10 * time.Second
	}
	r.init()
	clock := r.Clock
	if clock == nil {
		clock = engine.RealClock
	}
	r.started = clock.Now()
	first := true
	for {
		err := r.beat(ctx)
		r.TestSignals.Beat.Signal(err)
		switch {
		case errors.Is(err, errLockNotHeld):
			// The lock's own loss and return are logged by the lock.
		case err != nil:
			if ctx.Err() != nil {
				return nil //nolint:nilerr // a beat cut short by shutdown is not a failure
			}
			if r.Outage.Failed("member-beat", err) {
				break
			}
			r.Log.Warn().Err(err).Str("member_id", r.ID).Msg("membership beat failed; retrying next beat")
		case first:
			r.Outage.Succeeded()
			first = false
			close(r.beaten)
			r.Log.Info().Str("member_id", r.ID).Str("role", r.Role).Msg("registered cluster member")
			if r.OnRegistered != nil {
				r.OnRegistered()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.kick:
		case <-clock.After(r.Every):
		}
	}
}

func (r *Reporter) member() membership.Member {
	host, _ := os.Hostname()
	cfg, _ := json.Marshal(r.Config)
	m := membership.Member{ID: r.ID, Role: r.Role, Version: r.Version, Host: host, PID: os.Getpid(),
		Config: cfg, StartedAt: r.started, Liveness: r.Liveness}
	if m.Liveness <= 0 {
		m.Liveness = 3 * r.Every
	}
	if r.Kinds != nil {
		m.Kinds = r.Kinds()
	}
	if r.Shards != nil {
		sp := r.Shards.Span()
		m.Shards = &sp
	}
	if r.InFlight != nil {
		m.InFlight = r.InFlight()
	}
	if r.Workers != nil {
		m.Workers = r.Workers()
	}
	if r.Lock != nil {
		m.LockKey = r.Lock.Key()
	}
	return m
}

// errLockNotHeld skips a beat while the liveness lock is being re-taken.
var errLockNotHeld = errors.New("liveness lock not held")

// beatTimeout bounds one beat's upsert.
const beatTimeout = 5 * time.Second

// beat upserts the member's row. The upsert runs to its answer however the
// shutdown cuts ctx short, bounded by beatTimeout: abandoned in flight, the
// database could still run it after the host's Deregister (a statement
// already sent runs whatever the client does), writing the row back; the
// member then released its liveness lock and exited, and a peer found the
// row without its lock and reported a clean shutdown as a crash
// (TestProcess_APeerReportsAKilledMemberButNotOneThatShutDown, under load:
// a re-tile's beat, kicked as the member was stopped).
func (r *Reporter) beat(ctx context.Context) error {
	if r.Lock != nil && !r.Lock.Held() {
		return errLockNotHeld
	}
	m := r.member()
	m.Rejoin = r.rejoin.Swap(false)
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), beatTimeout)
	defer cancel()
	_, err := r.Registry.Upsert(uctx, m)
	if err != nil && m.Rejoin {
		r.rejoin.Store(true) // the return is still to be announced
	}
	return err
}

// Deregister deletes this member's row, bounded by 5 s on a fresh context.
func (r *Reporter) Deregister() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.Registry.Deregister(ctx, r.ID); err != nil {
		r.Log.Warn().Err(err).Str("member_id", r.ID).Msg("deregister failed; peers remove the row once the database sees this process's liveness lock go (the member GC after 5 minutes for a member without one)")
		return
	}
	r.Log.Info().Str("member_id", r.ID).Msg("deregistered cluster member")
}
