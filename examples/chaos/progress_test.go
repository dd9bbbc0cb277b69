package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The window without progress is measured up to the poll that sees the
// count move again, also when the polls before it were far apart (the
// stall dump's queries block on a frozen database until it thaws): an 8 s
// stall is an 8 s gap, never the 3 s the last poll inside it saw.
func TestProgress_TheGapEndsAtThePollThatSeesProgress(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	at := t0.Add
	p := newProgress(t0)
	p.observe(at(0), 10, time.Time{})
	p.observe(at(time.Second), 11, time.Time{})
	p.observe(at(2*time.Second), 11, time.Time{})
	p.observe(at(4*time.Second), 11, time.Time{}) // the last poll before a long one: 3 s so far
	p.observe(at(9*time.Second), 12, time.Time{}) // the count moved: the window was 8 s
	require.Equal(t, 8*time.Second, p.maxGap)
}

// The fault's own outage does not count, and the window after it counts
// from its end.
func TestProgress_TheOutageDoesNotCount(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	at := t0.Add
	p := newProgress(t0)
	p.observe(at(0), 10, time.Time{})
	quiet := at(8 * time.Second)
	for s := 1; s <= 8; s++ {
		p.observe(at(time.Duration(s)*time.Second), 10, quiet)
	}
	require.Zero(t, p.maxGap, "inside the outage")
	p.observe(at(10*time.Second), 11, quiet)
	require.Equal(t, 2*time.Second, p.maxGap, "counted from the end of the outage")
}
