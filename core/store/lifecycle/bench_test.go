package lifecycle_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge/core/store/lifecycle"
	"github.com/converge-run/converge/db/pgpool"
	"github.com/converge-run/converge/db/pgtest"
)

// BenchmarkDelivery drains a reactor backlog as a broker's reactor
// dispatcher does: BENCH_N pending deliveries (default 20000) for two
// reactors over every shard, claimed benchDeliveryBatch at a time by one
// broker owning all 256 shards, each acknowledged on its own, until none is
// left; it prints one bench-delivery line. The rate is the store's side of
// reactor delivery (a claim and an ack per delivery, no reactor), and a claim
// that read the backlog instead of its batch made it fall with the backlog's
// size. Run it alone:
//
//	BENCH_N=20000 go test ./core/store/lifecycle -run '^$' -bench '^BenchmarkDelivery$' -benchtime 1x
//
// It starts its own private Postgres at default durability.
func BenchmarkDelivery(b *testing.B) {
	n := 20000
	if v := os.Getenv("BENCH_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("BENCH_N=%q: want a positive integer", v)
		}
	}
	ctx := context.Background()
	pool := deliveryPool(b, ctx)
	st := lifecycle.New(pool)
	if _, err := pool.Exec(ctx, `INSERT INTO reactor_bindings (name, watch_kind, transition, reactor)
VALUES ('audit', 'vpc', 'synced', 'sink'), ('billing', 'vpc', 'synced', 'meter')`); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := pool.Exec(ctx, `
INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot, created_at)
SELECT gen_random_uuid(), 'synced', 1, CASE WHEN g % 2 = 0 THEN 'audit' ELSE 'billing' END, g % 256,
       CASE WHEN g % 2 = 0 THEN 'sink' ELSE 'meter' END, 'vpc', '{"id": "x", "status": {"ready": true}}',
       now() + g * interval '1 microsecond'
  FROM generate_series(1, $1) g`, n); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `ANALYZE lifecycle_outbox`); err != nil {
			b.Fatal(err)
		}
		start, claims := time.Now(), 0
		for done := 0; done < n; {
			ds, err := st.Claim(ctx, "broker-1", []string{"sink", "meter"}, 0, 255, benchDeliveryBatch)
			if err != nil {
				b.Fatal(err)
			}
			if len(ds) == 0 {
				b.Fatalf("claimed nothing with %d of %d delivered", done, n)
			}
			claims++
			for _, d := range ds {
				if ok, err := st.Ack(ctx, d); err != nil || !ok {
					b.Fatalf("ack: %v (still ours: %v)", err, ok)
				}
			}
			done += len(ds)
		}
		elapsed := time.Since(start)
		fmt.Printf("bench-delivery: n=%d deliveries_per_sec=%.0f claims=%d claim_batch=%d elapsed_s=%.1f\n",
			n, float64(n)/elapsed.Seconds(), claims, benchDeliveryBatch, elapsed.Seconds())
	}
}

// benchDeliveryBatch is a claim's size: a dispatcher claims as many as it
// has room for, up to its cap.
const benchDeliveryBatch = 100

func deliveryPool(b *testing.B, ctx context.Context) *pgxpool.Pool {
	b.Helper()
	url := pgtest.BenchURL(b, pgtest.QueueBenchSettings())
	cfg, err := pgpool.Config(url, 4)
	if err != nil {
		b.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}
