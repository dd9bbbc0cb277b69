package broker

import (
	"sync"
	"sync/atomic"
	"time"
)

// goPool runs functions on goroutines that outlive one function. A task's
// goroutine grows its stack to the depth of a stage (the runner, the
// stager, Connect, pgx), and a fresh goroutine per task paid that growth,
// copy by copy, every time: runtime.newstack was 4.5% of converge's CPU in
// a 1M run. A pooled goroutine that finishes a function takes the next one
// handed to the pool, or exits once it has waited idle with none, so the
// pool holds as many goroutines as the concurrency it served within the
// last idle window; after stop, each exits as soon as its function
// returns. Go never waits: with no goroutine free it starts one.
type goPool struct {
	work chan func()
	idle time.Duration
	done chan struct{}
	once sync.Once

	started, exited atomic.Int64 // goroutines started and ended, for tests
}

func newGoPool(idle time.Duration) *goPool {
	return &goPool{work: make(chan func()), idle: idle, done: make(chan struct{})}
}

// Go runs f on a free pooled goroutine, or on a new one.
func (p *goPool) Go(f func()) {
	select {
	case p.work <- f:
	default:
		p.started.Add(1)
		go p.loop(f)
	}
}

func (p *goPool) loop(f func()) {
	defer p.exited.Add(1)
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		f()
		t.Reset(p.idle)
		select {
		case f = <-p.work:
		case <-t.C:
			return
		case <-p.done:
			return
		}
	}
}

// stop lets every pooled goroutine exit once its function returns.
func (p *goPool) stop() { p.once.Do(func() { close(p.done) }) }
