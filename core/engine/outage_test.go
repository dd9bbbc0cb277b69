package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/engine"
)

// stepClock is a clock the test moves by hand.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}
func (c *stepClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (c *stepClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestOutage_OneWarnWhenItGoesOneInfoWhenItReturns(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	clk := &stepClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	o := &engine.Outage{Log: zerolog.New(&buf), Clock: clk}
	refused := fmt.Errorf("claim: %w", syscall.ECONNREFUSED)
	for i := range 50 {
		require.True(t, o.Failed(fmt.Sprintf("loop-%d", i%5), refused), "unreachable: the loop logs nothing")
		clk.add(100 * time.Millisecond)
	}
	require.True(t, o.Down())
	o.Succeeded() // within the settle window of the last failure: same outage
	require.True(t, o.Down())
	clk.add(2 * time.Second)
	o.Succeeded()
	o.Succeeded()
	require.False(t, o.Down())
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2, "one WARN and one INFO for 50 failures of 5 loops:\n%s", buf.String())
	require.Contains(t, lines[0], `"level":"warn"`)
	require.Contains(t, lines[1], `"level":"info"`)
	require.Contains(t, lines[1], `"suppressed_errors":49`)
	require.Contains(t, lines[1], `"outage":4900`, "from the first failure to the last")

	require.False(t, o.Failed("claim", errors.New("syntax error at or near")), "a statement's own error is the loop's to log")
	var nilOutage *engine.Outage
	require.False(t, nilOutage.Failed("claim", refused), "a nil outage leaves logging to the loop")
	nilOutage.Succeeded()
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		err  error
		want bool
	}{
		"Refused":        {err: fmt.Errorf("x: %w", syscall.ECONNREFUSED), want: true},
		"AdminShutdown":  {err: fmt.Errorf("x: %w", &pgconn.PgError{Code: "57P01"}), want: true},
		"CannotConnect":  {err: &pgconn.PgError{Code: "57P03"}, want: true},
		"ConnException":  {err: &pgconn.PgError{Code: "08006"}, want: true},
		"Deadline":       {err: fmt.Errorf("x: %w", context.DeadlineExceeded), want: true},
		"UniqueViolated": {err: &pgconn.PgError{Code: "23505"}},
		"Canceled":       {err: context.Canceled},
		"Plain":          {err: errors.New("no applied manifest")},
		"Nil":            {},
	}
	for name, tc := range cases {
		require.Equal(t, tc.want, engine.Unreachable(tc.err), name)
	}
}

func TestBackoff_DoublesToItsCapWithJitter(t *testing.T) {
	t.Parallel()
	var b engine.Backoff
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1000 * ms, 1000 * ms}
	for _, w := range want {
		d := b.Next()
		require.GreaterOrEqual(t, d, w*3/4)
		require.LessOrEqual(t, d, w*5/4)
	}
	b.Reset()
	require.LessOrEqual(t, b.Next(), 125*time.Millisecond)
}

// Ended is closed when the outage in progress ends, and a later call waits
// for the next one.
func TestOutage_EndedClosesWhenTheOutageEnds(t *testing.T) {
	t.Parallel()
	clk := &stepClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	o := &engine.Outage{Log: zerolog.Nop(), Clock: clk}
	ended := o.Ended()
	require.True(t, o.Failed("claim", syscall.ECONNREFUSED))
	clk.add(2 * time.Second)
	select {
	case <-ended:
		t.Fatal("closed before the outage ended")
	default:
	}
	o.Succeeded()
	select {
	case <-ended:
	default:
		t.Fatal("not closed when the outage ended")
	}
	select {
	case <-o.Ended():
		t.Fatal("a new call waits for the next outage")
	default:
	}
	var nilOutage *engine.Outage
	require.Nil(t, nilOutage.Ended())
}
