package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/examples/classic"
	"github.com/converge-run/converge/examples/stack"
)

// probe is how the bench sees the run finish, kept off the measured path:
// one connection of its own (so its backend's CPU can be told apart from
// the system's) reading the folded phase counts of the bom kind —
// resource_phase_counts plus the deltas not yet folded (converge folds them
// every second), a few dozen rows whatever N is — once per interval. It
// never reads resources: each leaf's READY time is its row's updated_at,
// read back once the run is over.
type probe struct {
	pool  *pgxpool.Pool
	store *store.Store
	pid   int // the connection's backend
	polls int
}

func openProbe(ctx context.Context, url string) (*probe, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("probe connection: %w", err)
	}
	cfg.MinConns, cfg.MaxConns = 1, 1
	cfg.MaxConnLifetime, cfg.MaxConnIdleTime = 24*time.Hour, 24*time.Hour // keep one backend for the whole run
	cfg.ConnConfig.RuntimeParams["application_name"] = "bench-probe"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("probe connection: %w", err)
	}
	p := &probe{pool: pool, store: store.New(pool, nil)}
	if p.pid, err = p.backendPid(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return p, nil
}

func (p *probe) close() { p.pool.Close() }

func (p *probe) backendPid(ctx context.Context) (int, error) {
	c, err := p.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("probe connection: %w", err)
	}
	defer c.Release()
	return int(c.Conn().PgConn().PID()), nil
}

// cpu is the probe backend's CPU so far.
func (p *probe) cpu() (time.Duration, error) { return stack.BackendCPU(p.pid) }

// cpuSince is the probe backend's CPU since before (in ms), or NaN when the
// connection was replaced meanwhile (its old backend's time is then in
// the postmaster's children times, not attributable).
func (p *probe) cpuSince(ctx context.Context, before time.Duration) float64 {
	if pid, err := p.backendPid(ctx); err != nil || pid != p.pid {
		return math.NaN()
	}
	d, err := p.cpu()
	if err != nil {
		return math.NaN()
	}
	return ms(d - before)
}

// waitRoots polls until roots bom roots (besides the warm-up) are READY,
// reporting progress on stderr every 5 s (with the all-kinds counts, only
// then).
func (p *probe) waitRoots(ctx context.Context, st *stack.Stack, roots int, every time.Duration, started time.Time) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	lastReport := time.Now()
	for {
		p.polls++
		bomCounts, err := p.store.PhaseCounts(ctx, classic.KindBOM)
		if err != nil {
			return err
		}
		readyRoots := count(bomCounts, resource.PhaseReady) - 1 // the warm-up bom
		if readyRoots >= roots {
			fmt.Fprintf(os.Stderr, "bench: all %d roots ready after %s\n", roots, time.Since(started).Round(time.Millisecond))
			return nil
		}
		if time.Since(lastReport) >= 5*time.Second {
			lastReport = time.Now()
			p.polls++
			counts, err := p.store.PhaseCounts(ctx, "")
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "bench: %s: ready=%d reconciling=%d failed=%d degraded=%d (roots ready %d/%d)\n",
				time.Since(started).Round(time.Second), count(counts, resource.PhaseReady), count(counts, resource.PhaseReconciling),
				count(counts, resource.PhaseFailed), count(counts, resource.PhaseDegraded), readyRoots, roots)
		}
		if err := st.Exited(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("roots not ready: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

func count(cs []resource.PhaseCount, p resource.Phase) int {
	for _, c := range cs {
		if c.Phase == p {
			return int(c.Count)
		}
	}
	return 0
}

// total is every resource row, of every kind and phase, by the folded
// phase counts.
func (p *probe) total(ctx context.Context) (int, error) {
	p.polls++
	counts, err := p.store.PhaseCounts(ctx, "")
	if err != nil {
		return 0, err
	}
	t := 0
	for _, c := range counts {
		t += int(c.Count)
	}
	return t, nil
}
