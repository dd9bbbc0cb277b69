package engine

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"
)

// Outage is a process's one view of the database being unreachable, shared
// by its loops (claim, drain, reaper, hub, membership). A loop reports each
// failure (Failed) and each success (Succeeded). The first failure that is
// the database being unreachable logs one WARN for the whole process; the
// rest of the outage is quiet; the first success once failures have stopped
// for Settle logs one INFO with the outage's length. Errors that are not
// unreachability (a statement's own failure) are left to the loop to log.
// A nil *Outage reports nothing and treats every error as the loop's own.
type Outage struct {
	Log   zerolog.Logger
	Clock Clock // nil: the wall clock
	// Settle is how long failures must have stopped before a success ends
	// the outage (default 2 s, above every loop's 1 s backoff cap): a pool's
	// stale connections failing one by one after the database returns do not
	// make a second outage, and a loop that had nothing to ask the database
	// (an empty shard range) cannot end one that the others still see.
	Settle time.Duration

	mu         sync.Mutex
	ended      chan struct{} // closed when the current outage ends (Ended)
	down       bool
	since      time.Time
	lastFail   time.Time
	suppressed int
	loops      map[string]bool
}

func (o *Outage) clock() Clock {
	if o.Clock == nil {
		return RealClock
	}
	return o.Clock
}

// Failed reports a loop's error; it returns true when err is the database
// being unreachable (then the outage is logged for the process, and the
// loop logs nothing).
func (o *Outage) Failed(loop string, err error) bool {
	if o == nil || err == nil || !Unreachable(err) {
		return false
	}
	now := o.clock().Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lastFail = now
	if o.loops == nil {
		o.loops = map[string]bool{}
	}
	o.loops[loop] = true
	if o.down {
		o.suppressed++
		return true
	}
	o.down, o.since, o.suppressed = true, now, 0
	o.Log.Warn().Err(err).Str("loop", loop).
		Msg("database unreachable; loops back off quietly until it returns")
	return true
}

// Succeeded reports a loop's successful round trip; it ends an outage once
// failures have stopped for Settle.
func (o *Outage) Succeeded() {
	if o == nil {
		return
	}
	now := o.clock().Now()
	settle := o.Settle
	if settle <= 0 {
		settle = 2 * time.Second
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.down || now.Sub(o.lastFail) < settle {
		return
	}
	loops := make([]string, 0, len(o.loops))
	for l := range o.loops {
		loops = append(loops, l)
	}
	o.Log.Info().Dur("outage", o.lastFail.Sub(o.since)).Dur("down_for", now.Sub(o.since)).
		Int("suppressed_errors", o.suppressed).Strs("loops", loops).Msg("database reachable again; loops resumed")
	o.down, o.loops = false, nil
	if o.ended != nil {
		close(o.ended)
		o.ended = nil
	}
}

// Ended returns a channel closed when the outage in progress, or the next
// one, ends (the moment Succeeded logs its INFO): a loop with catch-up work
// after an outage (the reaper rebuilding a queue a crash wiped) waits on it.
// A nil *Outage never ends one (nil channel).
func (o *Outage) Ended() <-chan struct{} {
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended == nil {
		o.ended = make(chan struct{})
	}
	return o.ended
}

// Down reports whether an outage is in progress.
func (o *Outage) Down() bool {
	if o == nil {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.down
}

// Unreachable reports whether err is the database (or the network to it)
// being unavailable rather than a statement failing: a failed connect, a
// closed or reset connection, a timeout, or a server-side connection
// exception, shutdown or refusal (SQLSTATE class 08, 57P01–57P03, 53300).
func Unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" ||
			pgErr.Code == "57P03" || pgErr.Code == "53300"
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connErr), errors.As(err, &netErr), pgconn.Timeout(err),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "closed pool") ||
		strings.Contains(msg, "failed to connect") || strings.Contains(msg, "connection refused")
}

// Backoff is a loop's retry delay while it keeps failing: it doubles from
// Min (default 100 ms) to Max (default 1 s), ±25 % jitter, so loops do not
// retry in lockstep and the first success after the database returns comes
// within about Max.
type Backoff struct {
	Min, Max time.Duration
	cur      time.Duration
}

// Next is the delay before the next retry.
func (b *Backoff) Next() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = 100 * time.Millisecond
	}
	if hi < lo {
		hi = max(lo, time.Second)
	}
	b.cur = min(max(2*b.cur, lo), hi)
	return Jitter(b.cur)
}

// Reset starts over after a success.
func (b *Backoff) Reset() { b.cur = 0 }

// Jitter is d ± 25 %.
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d*3/4 + time.Duration(rand.Int64N(int64(d)/2+1))
}
