package main

import (
	"context"
	"sync"
	"time"

	"github.com/converge-run/converge/examples/stack"
)

// rssEvery is how often the window samples converge's and the worker's
// resident set: the same for every N, so a 10k run (a couple of seconds)
// and a 1M run (minutes) are averaged alike.
const rssEvery = 100 * time.Millisecond

// rssSampler averages converge's and the worker's VmRSS over the measured
// window. The peak (VmHWM) is the largest of the collector's swings in the
// whole window, and a window a hundred times longer sees larger ones by
// chance alone; the mean is what a process holds through it, and the two
// side by side tell growth in N from a longer run's luck.
type rssSampler struct {
	stop func()
	done sync.WaitGroup
	sum  [2]float64 // converge, worker: MiB
	n    int
}

func sampleRSS(ctx context.Context, st *stack.Stack) *rssSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &rssSampler{stop: cancel}
	s.done.Go(func() {
		t := time.NewTicker(rssEvery)
		defer t.Stop()
		for {
			if c, w, err := st.RSSMB(); err == nil {
				s.sum[0], s.sum[1], s.n = s.sum[0]+c, s.sum[1]+w, s.n+1
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return s
}

// means stops the sampler and returns the mean RSS of converge and of the
// worker (0 with no sample).
func (s *rssSampler) means() (convergeMB, workerMB float64) {
	s.stop()
	s.done.Wait()
	if s.n == 0 {
		return 0, 0
	}
	return s.sum[0] / float64(s.n), s.sum[1] / float64(s.n)
}
