package api_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/api"
	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/db/pgtest"
	"github.com/converge-run/converge/resolvers"
)

// benchSettings: a production-like configuration for a small machine,
// durability on (fsync, synchronous_commit and full_page_writes at their
// defaults).
var benchSettings = map[string]string{
	"shared_buffers":       "2GB",
	"effective_cache_size": "8GB",
	"work_mem":             "16MB",
	"maintenance_work_mem": "512MB",
	"max_wal_size":         "8GB",
	"checkpoint_timeout":   "30min",
	"random_page_cost":     "1.1",
	"jit":                  "off",
	"max_connections":      "200",
}

// BenchmarkAPI loads BENCH_ROWS resources (default 1,000,000: every 50th a
// "vpc" root, the rest its "subnet" children) into a private Postgres and
// measures, end to end over HTTP through the real handler:
//
//   - the resources page: the first page, deep pages by cursor, and
//     phase-filtered pages (a phase union, and kind+phase deep pages);
//   - commit→websocket-frame latency for BENCH_SUBSCRIBERS (default 1,000)
//     concurrent graphql-transport-ws subscribers, each on its own
//     connection watching resourceChanged(ownerId:) of its own root, while
//     the pipeline store (spec bump → gate → claim → outbox → drain) churns
//     the children of those roots in batches as fast as it can for
//     BENCH_CHURN (default 20s). The latency of a change is the frame's
//     arrival minus the instant the drain's COMMIT was sent.
//
// It prints one line:
//
//	bench-api: rows=<n> page_p99_ms=<f> deep_p99_ms=<f> filtered_p99_ms=<f> subscribers=<n> ws_p50_ms=<f> ws_p99_ms=<f>
//
// Run: BENCH_ROWS=1000000 go test ./core/api -run '^$' -bench '^BenchmarkAPI$' -benchtime 1x -timeout 60m
func BenchmarkAPI(b *testing.B) {
	n := envInt(b, "BENCH_ROWS", 1000000) / 50 * 50
	subs := envInt(b, "BENCH_SUBSCRIBERS", 1000)
	churn := 20 * time.Second
	if v := os.Getenv("BENCH_CHURN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("BENCH_CHURN=%q: %v", v, err)
		}
		churn = d
	}
	if subs > n/50 {
		subs = n / 50
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.StopTimer()

	pool := benchPool(b, ctx)
	seed(b, ctx, pool, n)

	log := zerolog.Nop()
	listener := notify.NewListener(pool, log)
	hub := live.NewHub(listener, pool, log)
	go func() { _ = hub.Run(ctx) }()
	<-hub.Started()
	go func() { _ = listener.Run(ctx) }()
	<-listener.Ready()
	srv := httptest.NewServer(api.NewHandler(api.Deps{Schema: resolvers.NewSchema(resolvers.Deps{Store: store.New(pool, pool), Hub: hub, Version: "bench"}), Log: log}))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}

	// Deep cursors: 100 positions spread over the whole order, and 100 in
	// the order of the Ready subnets.
	cursors := func(where string) []string {
		rows, err := pool.Query(ctx, `SELECT created_at, id FROM (
			SELECT created_at, id, row_number() OVER (ORDER BY created_at DESC, id DESC) AS rn FROM resources `+where+`) t
			WHERE rn % greatest(1, (SELECT count(*) FROM resources `+where+`) / 100) = 0`)
		if err != nil {
			b.Fatal(err)
		}
		var out []string
		for rows.Next() {
			var at time.Time
			var id uuid.UUID
			if err := rows.Scan(&at, &id); err != nil {
				b.Fatal(err)
			}
			out = append(out, store.CursorAt(at, id))
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		return out
	}
	all, readySubnets := cursors(""), cursors(`WHERE kind = 'subnet' AND phase = 'Ready'`)

	const fields = `items { id kind name phase ready generation syncedGeneration labels updatedAt } nextCursor`
	rng := rand.New(rand.NewPCG(1, 2))
	// Settle after the load: autovacuum, the pool's connections, the caches.
	if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) resources"); err != nil {
		b.Fatal(err)
	}
	measurePage(b, client, srv.URL, "(warm-up)", func() (string, map[string]any) {
		return `query($a: String) { resources(first: 50, after: $a) { ` + fields + ` } }`,
			map[string]any{"a": all[rng.IntN(len(all))]}
	})
	b.StartTimer()
	first := measurePage(b, client, srv.URL, "first page", func() (string, map[string]any) {
		return `{ resources(first: 50) { ` + fields + ` } }`, nil
	})
	deep := measurePage(b, client, srv.URL, "deep page", func() (string, map[string]any) {
		return `query($a: String) { resources(first: 50, after: $a) { ` + fields + ` } }`,
			map[string]any{"a": all[rng.IntN(len(all))]}
	})
	union := measurePage(b, client, srv.URL, "phase union", func() (string, map[string]any) {
		return `{ resources(first: 50, phases: [FAILED, DEGRADED, RECONCILING]) { ` + fields + ` } }`, nil
	})
	kindPhase := measurePage(b, client, srv.URL, "kind+phase deep", func() (string, map[string]any) {
		return `query($a: String) { resources(first: 50, kind: "subnet", phases: [READY], after: $a) { ` + fields + ` } }`,
			map[string]any{"a": readySubnets[rng.IntN(len(readySubnets))]}
	})
	nested := measurePage(b, client, srv.URL, "nested page", func() (string, map[string]any) {
		return `query($a: String) { resources(first: 50, after: $a) { items { name phase owner { name }
			conditions { type status } providerConfig { name } children(first: 5) { items { name phase } } } } }`,
			map[string]any{"a": all[rng.IntN(len(all))]}
	})
	_ = nested
	b.StopTimer()

	wsP50, wsP99, frames := measureWebsocket(b, ctx, pool, srv.URL, hub, subs, churn)
	fmt.Fprintf(os.Stderr, "  websocket: %d frames measured\n", frames)
	drainCost(b, ctx, pool, n)

	fmt.Printf("bench-api: rows=%d page_p99_ms=%.2f deep_p99_ms=%.2f filtered_p99_ms=%.2f subscribers=%d ws_p50_ms=%.2f ws_p99_ms=%.2f\n",
		n, first, deep, max(union, kindPhase), subs, wsP50, wsP99)
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 100 {
		b.Fatalf("%s=%q: want an integer ≥ 100", name, v)
	}
	return n
}

// benchPool starts a private cluster with benchSettings and migrates a
// database; all removed when the benchmark ends.
func benchPool(b *testing.B, ctx context.Context) *pgxpool.Pool {
	b.Helper()
	url := pgtest.BenchURL(b, benchSettings)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	var settings []string
	for k := range benchSettings {
		var v string
		if err := pool.QueryRow(ctx, "SELECT current_setting($1)", k).Scan(&v); err != nil {
			b.Fatal(err)
		}
		settings = append(settings, k+"="+v)
	}
	sort.Strings(settings)
	var version string
	_ = pool.QueryRow(ctx, "SHOW server_version").Scan(&version)
	fmt.Fprintf(os.Stderr, "  postgres %s, %s\n", version, strings.Join(settings, " "))
	return pool
}

// seed loads n rows: row g has id md5('r'||g), is a "vpc" root when g%50 = 0
// and otherwise a "subnet" child of root g - g%50; phases are mixed
// (about 90% Ready, 5% Reconciling, 3% Degraded, 1% Failed, 1% Quarantined).
func seed(b *testing.B, ctx context.Context, pool *pgxpool.Pool, n int) {
	b.Helper()
	start := time.Now()
	for _, m := range []string{
		`{"kind":"vpc","reactions":[{"name":"c","trigger":"specChange","emits":["children","status"]}],"spec_schema":{"type":"object"}}`,
		`{"kind":"subnet","reactions":[{"name":"w","trigger":"specChange","emits":["status"]}],"spec_schema":{"type":"object"}}`,
	} {
		if _, _, err := store.New(pool, pool).ApplyManifest(ctx, []byte(m)); err != nil {
			b.Fatal(err)
		}
	}
	const chunk = 100000
	for from := 0; from < n; from += chunk {
		_, err := pool.Exec(ctx, `
INSERT INTO resources (id, kind, version, name, labels, spec, status, generation, synced_gen, composed_gen, health_ok,
                       failure_gen, frozen_until, owner_id, root_id, shard_id, created_at, updated_at)
SELECT id, CASE WHEN g % 50 = 0 THEN 'vpc' ELSE 'subnet' END, 'v1', 'r' || g,
       jsonb_build_object('team', 't' || (g % 1000), 'env', CASE g % 3 WHEN 0 THEN 'prod' ELSE 'dev' END),
       jsonb_build_object('cidr', '10.0.0.0/24', 'n', g), jsonb_build_object('id', 'x-' || g),
       1, CASE WHEN g % 100 BETWEEN 90 AND 94 THEN 0 ELSE 1 END, 1,
       g % 100 NOT BETWEEN 95 AND 97,
       CASE WHEN g % 100 = 98 THEN 1 ELSE 0 END,
       CASE WHEN g % 100 = 99 THEN 'infinity'::timestamptz END,
       owner, owner, shard_of(id), now() - (g || ' milliseconds')::interval, now()
  FROM (SELECT g, md5('r' || g)::uuid AS id,
               CASE WHEN g % 50 = 0 THEN NULL ELSE md5('r' || (g - g % 50))::uuid END AS owner
          FROM generate_series($1::int, $2::int - 1) g) x`, from, min(from+chunk, n))
		if err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) resources"); err != nil {
		b.Fatal(err)
	}
	if _, err := store.New(pool, pool).FoldPhaseCounts(ctx); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "  loaded %d rows in %s\n", n, time.Since(start).Round(time.Second))
}

// measurePage POSTs 100 warm-up and 1,000 measured requests and returns the
// p99 in ms (wall time: HTTP, GraphQL, store and Postgres).
func measurePage(b *testing.B, c *http.Client, base, name string, next func() (string, map[string]any)) float64 {
	b.Helper()
	const iters, warmup = 1000, 100
	d := make([]time.Duration, 0, iters)
	for i := -warmup; i < iters; i++ {
		q, vars := next()
		body, _ := json.Marshal(map[string]any{"query": q, "variables": vars})
		t0 := time.Now()
		resp, err := c.Post(base+"/graphql", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		var out struct {
			Errors []json.RawMessage `json:"errors"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || len(out.Errors) > 0 {
			b.Fatalf("%s: %v %s", name, err, out.Errors)
		}
		if i >= 0 {
			d = append(d, time.Since(t0))
		}
	}
	fmt.Fprintf(os.Stderr, "  %-16s p50=%.2fms p99=%.2fms max=%.2fms\n", name, ms(pct(d, 50)), ms(pct(d, 99)), ms(slices.Max(d)))
	return ms(pct(d, 99))
}

// measureWebsocket connects subs subscribers (one connection each, each
// watching the children of its own root), churns those children through
// the pipeline store for churn, and returns the p50 and p99 of commit →
// frame, in ms, and how many frames it measured.
func measureWebsocket(b *testing.B, ctx context.Context, pool *pgxpool.Pool, base string, hub *live.Hub, subs int,
	churn time.Duration) (float64, float64, int) {
	b.Helper()
	type arrival struct {
		seq int64
		at  time.Time
	}
	var (
		mu       sync.Mutex
		commits  = map[int64]time.Time{} // drain sequence → its return
		arrivals []arrival
		wg       sync.WaitGroup
	)
	record := func(seq int64, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		arrivals = append(arrivals, arrival{seq, at})
	}
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "/graphql"
	conns := make([]*websocket.Conn, subs)
	for i := range subs {
		d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 10 * time.Second}
		c, _, err := d.Dial(wsURL, nil)
		if err != nil {
			b.Fatalf("dial %d: %v", i, err)
		}
		conns[i] = c
		root := uuid.UUID(md5sum("r" + strconv.Itoa(i*50)))
		_ = c.WriteJSON(map[string]any{"type": "connection_init"})
		_ = c.WriteJSON(map[string]any{"type": "subscribe", "id": "1", "payload": map[string]any{
			"query":     `subscription($o: ID) { resourceChanged(ownerId: $o) { type name resource { phase status } } }`,
			"variables": map[string]any{"o": root.String()}}})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, raw, err := c.ReadMessage()
				if err != nil {
					return
				}
				at := time.Now()
				var m struct {
					Type    string `json:"type"`
					Payload struct {
						Data struct {
							ResourceChanged struct {
								Resource *struct {
									Phase  string `json:"phase"`
									Status struct {
										Seq int64 `json:"seq"`
									} `json:"status"`
								} `json:"resource"`
							} `json:"resourceChanged"`
						} `json:"data"`
					} `json:"payload"`
				}
				if json.Unmarshal(raw, &m) != nil || m.Type != "next" {
					continue
				}
				// Only the drain's change (READY, with this round's seq) is
				// timed; the spec bump's RECONCILING frame still carries the
				// previous round's status.
				if r := m.Payload.Data.ResourceChanged.Resource; r != nil && r.Phase == "READY" && r.Status.Seq > 0 {
					record(r.Status.Seq, at)
				}
			}
		}()
	}
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
		wg.Wait()
	}()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if n, _, _, _ := hub.SubscriberCount(); n == subs {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("subscribers did not register")
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "  %d subscribers connected\n", subs)

	// The churn: batches of 200 children of the watched roots.
	ps := pipeline.New(pool)
	lease := pipeline.Lease{WorkerID: "bench", Lo: 0, Hi: 255}
	rng := rand.New(rand.NewPCG(3, 4))
	var seq int64
	changes := 0
	b.StartTimer()
	for end := time.Now().Add(churn); time.Now().Before(end); {
		ids := make([]uuid.UUID, 200)
		for i := range ids {
			root := rng.IntN(subs) * 50
			ids[i] = uuid.UUID(md5sum("r" + strconv.Itoa(root+1+rng.IntN(49))))
		}
		if _, err := pool.Exec(ctx, `UPDATE resources SET spec = spec || jsonb_build_object('bump', $2::bigint),
			synced_gen = least(synced_gen, generation), failure_gen = 0, frozen_until = NULL, health_ok = true
			WHERE id = ANY($1)`, ids, seq+1); err != nil {
			b.Fatal(err)
		}
		if _, err := ps.ScheduleEligible(ctx, ids); err != nil {
			b.Fatal(err)
		}
		tasks, err := ps.Claim(ctx, lease, pipeline.Batch{Kind: "subnet", Version: "v1", TaskType: pipeline.TaskReconcile, Max: 1000})
		if err != nil {
			b.Fatal(err)
		}
		seq++
		results := make([]pipeline.Result, len(tasks))
		for i, t := range tasks {
			results[i] = t.Result(json.RawMessage(fmt.Sprintf(`{"seq":%d}`, seq)))
		}
		if err := ps.AppendOutbox(ctx, results...); err != nil {
			b.Fatal(err)
		}
		for {
			// The drain as the pipeline store runs it (drain_outbox_batch),
			// in an explicit transaction so the clock starts when COMMIT is
			// sent: no frame can precede it (NOTIFY is delivered at commit),
			// and the figure includes the commit's own fsync.
			tx, err := pool.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			var k int
			if err := tx.QueryRow(ctx, `SELECT drain_outbox_batch($1, 0, 255)`, 1000).Scan(&k); err != nil {
				b.Fatal(err)
			}
			at := time.Now()
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
			if k == 0 {
				break
			}
			mu.Lock()
			if _, ok := commits[seq]; !ok {
				commits[seq] = at
			}
			mu.Unlock()
			changes += k
		}
	}
	b.StopTimer()
	// Let the last frames arrive.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		got := len(arrivals)
		mu.Unlock()
		if got >= changes {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var lat []time.Duration
	for _, a := range arrivals {
		if c, ok := commits[a.seq]; ok {
			lat = append(lat, max(a.at.Sub(c), 0))
		}
	}
	fmt.Fprintf(os.Stderr, "  churn: %d drained changes in %s (%.0f/s), %d frames timed\n",
		changes, churn, float64(changes)/churn.Seconds(), len(lat))
	if len(lat) == 0 {
		b.Fatal("no frame measured")
	}
	return ms(pct(lat, 50)), ms(pct(lat, 99)), len(lat)
}

// drainCost times drain batches of 500 results with and without the
// announcement trigger on resources (the cost 00004_announce.sql adds to the
// drainer's statements), alternating the two so noise hits both alike.
func drainCost(b *testing.B, ctx context.Context, pool *pgxpool.Pool, n int) {
	b.Helper()
	ps := pipeline.New(pool)
	lease := pipeline.Lease{WorkerID: "cost", Lo: 0, Hi: 255}
	var with, without []time.Duration
	round := 0
	drain := func() time.Duration {
		round++
		var ids []uuid.UUID
		for i := range 500 { // subnets only: g % 50 is never 0
			ids = append(ids, uuid.UUID(md5sum("r"+strconv.Itoa((round*3000+i*5+1)%n))))
		}
		if _, err := pool.Exec(ctx, `UPDATE resources SET spec = spec || '{"c":1}', synced_gen = 0, failure_gen = 0,
				frozen_until = NULL WHERE id = ANY($1)`, ids); err != nil {
			b.Fatal(err)
		}
		if _, err := ps.ScheduleEligible(ctx, ids); err != nil {
			b.Fatal(err)
		}
		tasks, err := ps.Claim(ctx, lease, pipeline.Batch{Kind: "subnet", Version: "v1", TaskType: pipeline.TaskReconcile, Max: 1000})
		if err != nil {
			b.Fatal(err)
		}
		rs := make([]pipeline.Result, len(tasks))
		for i, t := range tasks {
			rs[i] = t.Result(json.RawMessage(`{"cost":true}`))
		}
		if err := ps.AppendOutbox(ctx, rs...); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		k, err := ps.DrainOutboxBatch(ctx, 1000, 0, 255)
		if err != nil {
			b.Fatal(err)
		}
		if k == 0 {
			b.Fatal("drain cost: nothing drained")
		}
		return time.Since(t0)
	}
	toggle := func(op string) {
		if _, err := pool.Exec(ctx, `ALTER TABLE resources `+op+` TRIGGER resources_announce_update`); err != nil {
			b.Fatal(err)
		}
	}
	for range 40 {
		toggle("DISABLE")
		without = append(without, drain())
		toggle("ENABLE")
		with = append(with, drain())
	}
	fmt.Fprintf(os.Stderr, "  drain of 500 results: without announcements p50=%.2fms p99=%.2fms, with p50=%.2fms p99=%.2fms\n",
		ms(pct(without, 50)), ms(pct(without, 99)), ms(pct(with, 50)), ms(pct(with, 99)))
}

func md5sum(s string) [16]byte { return md5.Sum([]byte(s)) }

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p+99)/100 - 1
	return s[max(i, 0)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
