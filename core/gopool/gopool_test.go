package gopool

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPool_ReusesIdleGoroutinesAndLetsThemGo: a goroutine that finished
// takes the next function; concurrent functions get goroutines of their
// own; an idle goroutine exits after the idle window, and every goroutine
// exits after stop (synctest fails the test if any were left blocked).
func TestPool_ReusesIdleGoroutinesAndLetsThemGo(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := New(time.Second)
		ran := make(chan int, 16)

		p.Go(func() { ran <- 1 })
		synctest.Wait()
		p.Go(func() { ran <- 2 })
		synctest.Wait()
		require.EqualValues(t, 1, p.started.Load(), "the second function ran on the idle goroutine")

		release := make(chan struct{})
		for i := range 3 {
			p.Go(func() { <-release; ran <- 3 + i })
		}
		synctest.Wait()
		require.EqualValues(t, 3, p.started.Load(), "three at once: the idle goroutine and two new ones")
		close(release)
		synctest.Wait()

		time.Sleep(2 * time.Second) // past the idle window: the three exit
		synctest.Wait()
		require.EqualValues(t, 3, p.exited.Load(), "idle past the window: gone")
		p.Go(func() { ran <- 6 })
		synctest.Wait()
		require.EqualValues(t, 4, p.started.Load(), "after the idle window a function needs a new goroutine")

		block := make(chan struct{})
		p.Go(func() { <-block; ran <- 7 })
		synctest.Wait()
		p.Stop()
		close(block) // the busy one exits once its function returns, not after the idle window
		synctest.Wait()
		require.EqualValues(t, 4, p.exited.Load(), "stopped: every goroutine gone at once")
		close(ran)
		var got []int
		for v := range ran {
			got = append(got, v)
		}
		require.ElementsMatch(t, []int{1, 2, 3, 4, 5, 6, 7}, got)
	})
}
