package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/examples/classic"
	"github.com/converge-run/converge/examples/stack"
)

// rootName names the i-th measured root.
func rootName(i int) string { return fmt.Sprintf("bench-%06d", i) }

// applyRoots applies the roots from a few goroutines.
func applyRoots(ctx context.Context, st *stack.Stack, roots int, spec json.RawMessage) error {
	return eachRoot(roots, "applied", func(name string) error {
		_, _, err := st.Store.ApplyResource(ctx, store.ApplyResourceInput{Kind: classic.KindBOM, Name: name, Spec: spec, Actor: "bench"})
		if err != nil {
			return fmt.Errorf("apply root %s: %w", name, err)
		}
		return nil
	})
}

// eachRoot runs fn for every measured root's name from eight goroutines,
// stopping at the first error, and reports the time taken as "<roots> roots
// <done> in …".
func eachRoot(roots int, done string, fn func(name string) error) error {
	started := time.Now()
	var next atomic.Int64
	errc := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= roots {
					return
				}
				if err := fn(rootName(i)); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: %d roots %s in %s\n", roots, done, time.Since(started).Round(time.Millisecond))
	return nil
}

type result struct {
	rate, leafRate, tail, firstLeaf, p50, p99, rollup float64
}

// measure reads every root and leaf back, once the run is over, and
// computes the figures from the database's timestamps: created_at of a root
// is its apply, updated_at of a settled resource its READY write (the drain
// transaction's now()). The run starts at the first root's created_at.
func measure(ctx context.Context, st *stack.Stack, n int) (result, error) {
	rootsByID := map[uuid.UUID]resource.Resource{}
	err := each(ctx, st.Store, classic.KindBOM, func(r resource.Resource) {
		if r.Name != "warmup" {
			rootsByID[r.ID] = r
		}
	})
	if err != nil {
		return result{}, err
	}
	var first, last time.Time
	for _, r := range rootsByID {
		if first.IsZero() || r.CreatedAt.Before(first) {
			first = r.CreatedAt
		}
		if r.UpdatedAt.After(last) {
			last = r.UpdatedAt
		}
	}
	lastLeaf := map[uuid.UUID]time.Time{}
	var firstOfAll, lastOfAll time.Time // the run's first and last leaf READY
	var lat []float64
	notReady := 0
	for _, kind := range []string{classic.KindAccount, classic.KindVPC, classic.KindRoute} {
		err := each(ctx, st.Store, kind, func(r resource.Resource) {
			if r.OwnerID == nil {
				return
			}
			root, ok := rootsByID[*r.OwnerID]
			if !ok {
				return // the warm-up's
			}
			if r.Phase != resource.PhaseReady {
				notReady++
			}
			lat = append(lat, ms(r.UpdatedAt.Sub(root.CreatedAt)))
			if r.UpdatedAt.After(lastLeaf[root.ID]) {
				lastLeaf[root.ID] = r.UpdatedAt
			}
			if r.UpdatedAt.After(lastOfAll) {
				lastOfAll = r.UpdatedAt
			}
			if firstOfAll.IsZero() || r.UpdatedAt.Before(firstOfAll) {
				firstOfAll = r.UpdatedAt
			}
		})
		if err != nil {
			return result{}, err
		}
	}
	if len(lat) != n || notReady > 0 {
		return result{}, fmt.Errorf("read back %d leaves (%d not ready), want %d ready", len(lat), notReady, n)
	}
	var rollups []float64
	for id, r := range rootsByID {
		rollups = append(rollups, ms(r.UpdatedAt.Sub(lastLeaf[id])))
	}
	slices.Sort(lat)
	slices.Sort(rollups)
	return result{
		rate:      float64(n) / last.Sub(first).Seconds(),
		leafRate:  float64(n) / lastOfAll.Sub(first).Seconds(),
		tail:      ms(last.Sub(lastOfAll)),
		firstLeaf: ms(firstOfAll.Sub(first)),
		p50:       quantile(lat, 0.50),
		p99:       quantile(lat, 0.99),
		rollup:    quantile(rollups, 0.50),
	}, nil
}

// each pages through every resource of kind.
func each(ctx context.Context, st *store.Store, kind string, fn func(resource.Resource)) error {
	after := ""
	for {
		page, err := st.ListResources(ctx, store.ListOptions{Kind: kind, Limit: 500, After: after})
		if err != nil {
			return fmt.Errorf("list %s: %w", kind, err)
		}
		for _, r := range page.Items {
			fn(r)
		}
		if page.NextCursor == "" {
			return nil
		}
		after = page.NextCursor
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantile of sorted values (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
