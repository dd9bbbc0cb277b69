// Package gopool runs functions on goroutines that outlive one function,
// so a goroutine that grew its stack for one task keeps it for the next.
package gopool

import (
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs functions on goroutines that outlive one function. A task's
// goroutine grows its stack to the depth of its work (in the broker: the
// runner, the stager, Connect, pgx), and a fresh goroutine per task paid
// that growth, copy by copy, every time: runtime.newstack was 4.5% of
// converge's CPU in a 1M run. A pooled goroutine that finishes a function
// takes the next one handed to the pool, or exits once it has waited idle
// with none, so the pool holds as many goroutines as the concurrency it
// served within the last idle window; after Stop, each exits as soon as
// its function returns. Go never waits: with no goroutine free it starts
// one. The zero Pool is not usable; a nil *Pool runs each function on a
// goroutine of its own.
type Pool struct {
	work chan func()
	idle time.Duration
	done chan struct{}
	once sync.Once

	started, exited atomic.Int64 // goroutines started and ended, for tests
}

// New is a pool whose goroutines exit after idle without a function.
func New(idle time.Duration) *Pool {
	return &Pool{work: make(chan func()), idle: idle, done: make(chan struct{})}
}

// Go runs f on a free pooled goroutine, or on a new one.
func (p *Pool) Go(f func()) {
	if p == nil {
		go f()
		return
	}
	select {
	case p.work <- f:
	default:
		p.started.Add(1)
		go p.loop(f)
	}
}

func (p *Pool) loop(f func()) {
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

// Stop lets every pooled goroutine exit once its function returns. Go
// still runs functions after Stop, each on a goroutine that then exits.
func (p *Pool) Stop() {
	if p != nil {
		p.once.Do(func() { close(p.done) })
	}
}
