// Package notify bridges Postgres LISTEN/NOTIFY into the process: one
// dedicated connection per process LISTENs on every channel any component
// subscribed to, and fans each notification out to the subscribers of its
// channel. A notification is a latency hint, never the source of truth: every
// consumer also polls, and after a dropped connection the listener reconnects
// and tells every subscriber to re-read (Event.Reconnected). A connection
// silent for Listener.ProbeIdle is pinged, so one whose network died without
// a reset is noticed and re-made too.
package notify

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
)

// Event is one notification, or the news that the connection was re-made
// (notifications may have been missed: re-read).
type Event struct {
	Channel     string
	Payload     string
	Reconnected bool
}

// Subscription receives the events of one channel.
type Subscription struct {
	C       <-chan Event
	ch      chan Event
	channel string
	lost    atomic.Bool
	l       *Listener

	listening chan struct{} // closed once the channel is LISTENed (l.mu)
	heard     bool          // listening is closed (l.mu)
}

// Listening is closed once the subscription's channel is LISTENed on the
// listener's connection. Subscribe returns before that (the LISTEN is the
// listener's to issue), so a notification sent in between is not delivered:
// a consumer that reads its source of truth right after subscribing reads
// again once this is closed, or it can miss a change until its next poll.
func (s *Subscription) Listening() <-chan struct{} { return s.listening }

// TakeLost reports (and clears) whether events were dropped because C was
// full; a consumer that sees true must re-read from the source of truth.
func (s *Subscription) TakeLost() bool { return s.lost.Swap(false) }

// Close unsubscribes.
func (s *Subscription) Close() { s.l.unsubscribe(s) }

// Listener owns the LISTEN connection.
type Listener struct {
	// ProbeIdle is how long the connection may stay silent before the
	// listener pings it (default 30s), and ProbeTimeout how long the ping,
	// and a new connection's setup (acquire, LISTEN), may take (default
	// 10s). A LISTEN connection only reads: one whose network died without
	// a reset (a failed-over address, a dropped NAT entry) would otherwise
	// wait for a notification until TCP keepalive noticed, minutes later or
	// never, while every consumer's wakes were lost. Set before Run.
	ProbeIdle, ProbeTimeout time.Duration

	pool *pgxpool.Pool
	log  zerolog.Logger

	mu      sync.Mutex
	subs    map[string]map[*Subscription]struct{}
	listen  map[string]bool // channels LISTENed on the current connection
	changed chan struct{}   // a new channel needs LISTEN
	ready   chan struct{}   // closed once the first LISTEN succeeded
	readyOn sync.Once

	reconnects atomic.Int64
	outage     atomic.Pointer[engine.Outage]
}

// ReportTo makes the listener report a lost connection that is the database
// being unreachable to o (logged once per outage for the whole process)
// instead of logging every reconnect attempt.
func (l *Listener) ReportTo(o *engine.Outage) { l.outage.Store(o) }

// NewListener prepares a listener that takes its connection from pool.
func NewListener(pool *pgxpool.Pool, log zerolog.Logger) *Listener {
	return &Listener{
		pool:    pool,
		log:     log.With().Str("component", "listener").Logger(),
		subs:    map[string]map[*Subscription]struct{}{},
		listen:  map[string]bool{},
		changed: make(chan struct{}, 1),
		ready:   make(chan struct{}),
	}
}

// Subscribe receives channel's events on a buffer of size buf (≥1). A full
// buffer drops the event and marks the subscription lost (see TakeLost): for
// wake-up channels a buffer of 1 coalesces bursts into one wake.
func (l *Listener) Subscribe(channel string, buf int) *Subscription {
	if buf < 1 {
		buf = 1
	}
	ch := make(chan Event, buf)
	s := &Subscription{C: ch, ch: ch, channel: channel, l: l, listening: make(chan struct{})}
	l.mu.Lock()
	if l.subs[channel] == nil {
		l.subs[channel] = map[*Subscription]struct{}{}
	}
	l.subs[channel][s] = struct{}{}
	need := !l.listen[channel]
	if !need {
		s.markListening()
	}
	l.mu.Unlock()
	if need {
		select {
		case l.changed <- struct{}{}:
		default:
		}
	}
	return s
}

func (l *Listener) unsubscribe(s *Subscription) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.subs[s.channel], s)
}

// Ready is closed once the listener has LISTENed for the first time.
func (l *Listener) Ready() <-chan struct{} { return l.ready }

// Reconnects counts connections re-made after a loss.
func (l *Listener) Reconnects() int64 { return l.reconnects.Load() }

// Run holds the LISTEN connection until ctx ends, reconnecting with
// jittered backoff when it is lost.
func (l *Listener) Run(ctx context.Context) error {
	backoff := 50 * time.Millisecond
	first := true
	for {
		began := time.Now()
		err := l.session(ctx, !first)
		if time.Since(began) > 5*time.Second {
			backoff = 50 * time.Millisecond // a session that held: start over
		}
		if ctx.Err() != nil {
			return nil //nolint:nilerr // a session ended by shutdown is not a failure
		}
		first = false
		if !l.outage.Load().Failed("listener", err) {
			l.log.Warn().Err(err).Dur("retry_in", backoff).Msg("listen connection lost; reconnecting")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff/2 + time.Duration(rand.Int64N(int64(backoff)/2+1))):
		}
		// Capped at a second: the wakes this connection carries are lost
		// until it is back, so it must not lag the database's return.
		backoff = min(backoff*2, time.Second)
	}
}

func (l *Listener) session(ctx context.Context, reconnected bool) error {
	idle, probe := l.probes()
	setup, cancelSetup := context.WithTimeout(ctx, probe)
	defer cancelSetup()
	conn, err := l.pool.Acquire(setup)
	if err != nil {
		return fmt.Errorf("acquire listen connection: %w", err)
	}
	// The connection carries LISTEN state: never hand it back to the pool.
	defer func() {
		c := conn.Hijack()
		_ = c.Close(context.Background())
	}()
	l.mu.Lock()
	l.listen = map[string]bool{}
	l.mu.Unlock()
	if err := l.listenAll(setup, conn.Conn()); err != nil {
		return err
	}
	cancelSetup()
	l.readyOn.Do(func() { close(l.ready) })
	if reconnected {
		l.reconnects.Add(1)
		l.broadcast(Event{Reconnected: true})
	}
	for {
		n, err := l.wait(ctx, conn.Conn(), idle)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if conn.Conn().IsClosed() {
				return fmt.Errorf("wait for notification: %w", err)
			}
			step, cancel := context.WithTimeout(ctx, probe)
			switch {
			case errors.Is(err, context.Canceled):
				// A new channel was subscribed: LISTEN it and wait again.
				err = l.listenAll(step, conn.Conn())
			case errors.Is(err, context.DeadlineExceeded):
				// Silent for idle: a connection that cannot answer a ping is
				// dead, however long its socket stays open.
				if err = conn.Conn().Ping(step); err != nil {
					err = fmt.Errorf("probe the listen connection after %s of silence: %w", idle, err)
				}
			default:
				err = fmt.Errorf("wait for notification: %w", err)
			}
			cancel()
			if err != nil {
				return err
			}
			continue
		}
		l.dispatch(Event{Channel: n.Channel, Payload: n.Payload})
	}
}

// wait waits up to idle for a notification; a subscription to a channel
// not LISTENed yet cuts it short (context.Canceled), silence ends it with
// context.DeadlineExceeded.
func (l *Listener) wait(ctx context.Context, c *pgx.Conn, idle time.Duration) (*pgconn.Notification, error) {
	wctx, cancel := context.WithTimeout(ctx, idle)
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-l.changed:
			cancel()
		case <-stop:
		}
	}()
	return c.WaitForNotification(wctx)
}

// probes are ProbeIdle and ProbeTimeout with their defaults.
func (l *Listener) probes() (idle, timeout time.Duration) {
	idle, timeout = l.ProbeIdle, l.ProbeTimeout
	if idle <= 0 {
		idle = 30 * time.Second
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return idle, timeout
}

func (l *Listener) listenAll(ctx context.Context, c *pgx.Conn) error {
	l.mu.Lock()
	var todo []string
	for ch := range l.subs {
		if !l.listen[ch] {
			todo = append(todo, ch)
		}
	}
	l.mu.Unlock()
	for _, ch := range todo {
		if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return fmt.Errorf("listen %s: %w", ch, err)
		}
		l.mu.Lock()
		l.listen[ch] = true
		for s := range l.subs[ch] {
			s.markListening()
		}
		l.mu.Unlock()
	}
	return nil
}

// markListening closes s.listening once; l.mu is held.
func (s *Subscription) markListening() {
	if !s.heard {
		s.heard = true
		close(s.listening)
	}
}

func (l *Listener) dispatch(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.subs[e.Channel] {
		deliver(s, e)
	}
}

func (l *Listener) broadcast(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch, subs := range l.subs {
		e.Channel = ch
		for s := range subs {
			deliver(s, e)
		}
	}
}

func deliver(s *Subscription, e Event) {
	select {
	case s.ch <- e:
	default:
		s.lost.Store(true)
	}
}

// Name implements engine.Duty.
func (l *Listener) Name() string { return "listener" }
