package pipeline

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestClaim_StampsLeaseAndReturnsTheSnapshot(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker, `"task_deadline_secs": 30`)
	f.exec(`INSERT INTO providerconfigs (kind, name, spec, data) VALUES ('leaf', 'custom', '{"r":1}', '{"b":2}')`)
	root := f.res("leaf", "parent")
	id := f.res("leaf", "a", owner(root), spec(`{"cidr":"10.0.0.0/16"}`), labels(`{"team":"x"}`), configRef("custom"))
	f.set(id, `finalizers = '{test/teardown}'`)
	f.schedule(id)

	task := f.claimOne("leaf")
	require.Equal(t, id, task.Key.ResourceID)
	require.Equal(t, TaskReconcile, task.Key.TaskType)
	require.Equal(t, uuid.Nil, task.Key.OpID)
	require.Positive(t, task.ClaimEpoch)
	require.EqualValues(t, 1, task.Generation)
	require.Equal(t, "specChange", task.Trigger)
	require.Equal(t, 30*time.Second, task.Deadline)
	require.JSONEq(t, `{"r":1}`, string(task.ProviderConfig))
	require.JSONEq(t, `{"b":2}`, string(task.ProviderBundle))
	require.Equal(t, "a", task.Resource.Name)
	require.Equal(t, []string{"leaf", "v1"}, []string{task.Resource.Kind, task.Resource.Version})
	labels, err := task.Resource.Labels()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"team": "x"}, labels)
	require.JSONEq(t, `{"cidr":"10.0.0.0/16"}`, string(task.Resource.Spec))
	require.Equal(t, &root, task.Resource.OwnerID)
	require.Equal(t, []string{"test/teardown"}, task.Resource.Finalizers)

	var worker string
	var epoch int64
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT worker_id, claim_epoch FROM work_queue WHERE resource_id = $1 AND leased_at IS NOT NULL AND heartbeat_at IS NOT NULL`, id).Scan(&worker, &epoch))
	require.Equal(t, all.WorkerID, worker)
	require.Equal(t, task.ClaimEpoch, epoch)
	require.Empty(t, f.claim("leaf", 10), "a leased row is not claimed twice")
}

// TestClaim_EachTaskHasItsOwnSnapshot: a claim of many rows returns each
// row's own owner, labels, spec and finalizers — nothing of one row's
// snapshot shared with or left over from another's (the rows are scanned
// through one scratch task).
func TestClaim_EachTaskHasItsOwnSnapshot(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	parents := []uuid.UUID{f.res("leaf", "p0"), f.res("leaf", "p1")}
	type want struct {
		owner *uuid.UUID
		name  string
		fin   []string
	}
	wants := map[uuid.UUID]want{}
	for i := range 12 {
		name := fmt.Sprintf("c%d", i)
		opts := []resOpt{spec(fmt.Sprintf(`{"i":%d}`, i)), labels(fmt.Sprintf(`{"n":"%d"}`, i))}
		var o *uuid.UUID
		if i%3 != 2 { // every third one has no owner: a NULL after a non-NULL
			o = &parents[i%2]
			opts = append(opts, owner(*o))
		}
		id := f.res("leaf", name, opts...)
		var fin []string
		if i%2 == 0 {
			fin = []string{"test/" + name}
			f.set(id, fmt.Sprintf(`finalizers = '{test/%s}'`, name))
		}
		wants[id] = want{owner: o, name: name, fin: fin}
		f.schedule(id)
	}

	tasks := f.claim("leaf", 100)
	require.Len(t, tasks, len(wants))
	for _, task := range tasks {
		w := wants[task.Resource.ID]
		i := strings.TrimPrefix(w.name, "c")
		require.Equal(t, w.name, task.Resource.Name)
		require.Equal(t, w.owner, task.Resource.OwnerID, "%s's owner", w.name)
		labels, err := task.Resource.Labels()
		require.NoError(t, err)
		require.Equal(t, map[string]string{"n": i}, labels, "%s's labels", w.name)
		require.JSONEq(t, `{"i":`+i+`}`, string(task.Resource.Spec), "%s's spec", w.name)
		if w.fin == nil {
			require.Empty(t, task.Resource.Finalizers, "%s's finalizers", w.name)
		} else {
			require.Equal(t, w.fin, task.Resource.Finalizers, "%s's finalizers", w.name)
		}
	}
}

// Claims scan into a reused scratch slice: each must still hand back tasks
// of its own, which the next claim cannot overwrite, in a slice of exactly
// their number.
func TestClaim_EachClaimOwnsItsTasks(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	for i := range 6 {
		f.schedule(f.res("leaf", fmt.Sprintf("c%d", i)))
	}

	first := f.claim("leaf", 3)
	names := func(ts []Task) []string {
		var out []string
		for _, task := range ts {
			out = append(out, task.Resource.Name)
		}
		return out
	}
	firstNames := names(first)
	second := f.claim("leaf", 3)
	require.Len(t, first, 3)
	require.Len(t, second, 3)
	require.Equal(t, 3, cap(first), "the first claim's slice is of its size")
	require.Equal(t, firstNames, names(first), "the second claim left the first one's tasks alone")
	require.NotContains(t, names(second), firstNames[0], "the two claims hold different tasks")
	require.Empty(t, f.claim("leaf", 3), "nothing left to claim")
}

// A composite's rollup (pended with trigger childrenSettled once its
// descendants settle) is claimed ahead of its kind's older pending rows:
// queued behind the kind's composes, pended when the roots were applied, a
// root waited minutes with every descendant READY. A rollup not yet due
// still waits its turn. The order holds within a partition (a claim goes
// partition by partition), so the rows here share one.
func TestClaim_TakesDueRollupsFirst(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("comp", reactComposite)
	in := func(name string) uuid.UUID { return f.res("comp", name, withID(f.idInShards(0, 15))) }
	older1, older2, rollup := in("older-1"), in("older-2"), in("rollup")
	f.schedule(older1, older2, rollup)
	f.exec(`UPDATE work_queue SET not_before = now() - interval '1 hour' WHERE resource_id IN ($1, $2)`, older1, older2)
	f.exec(`UPDATE work_queue SET trigger = 'childrenSettled' WHERE resource_id = $1`, rollup)

	first := f.claim("comp", 1)
	require.Len(t, first, 1)
	require.Equal(t, rollup, first[0].Resource.ID, "the rollup, pended last, is claimed first")
	require.Equal(t, "childrenSettled", first[0].Trigger)

	rest := f.claim("comp", 5)
	require.Len(t, rest, 2)
	require.ElementsMatch(t, []uuid.UUID{older1, older2}, []uuid.UUID{rest[0].Resource.ID, rest[1].Resource.ID},
		"the batch is filled with the kind's other rows")

	later := in("later")
	f.schedule(later)
	f.exec(`UPDATE work_queue SET trigger = 'childrenSettled', not_before = now() + interval '1 hour' WHERE resource_id = $1`, later)
	require.Empty(t, f.claim("comp", 5), "a rollup not yet due is not claimed")
}

func TestClaim_OnlyRollupsTakesNothingElse(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("comp", reactComposite)
	// one other row in each of five partitions, and two rollups
	var others []uuid.UUID
	for p := range 5 {
		others = append(others, f.res("comp", fmt.Sprintf("other-%d", p), withID(f.idInShards(16*p, 16*p+15))))
	}
	r1, r2 := f.res("comp", "rollup-1", withID(f.idInShards(80, 95))), f.res("comp", "rollup-2", withID(f.idInShards(96, 111)))
	f.schedule(append([]uuid.UUID{r1, r2}, others...)...)
	f.exec(`UPDATE work_queue SET trigger = 'childrenSettled' WHERE resource_id IN ($1, $2)`, r1, r2)
	batch := func(onlyRollups bool) Batch {
		return Batch{Kind: "comp", Version: "v1", TaskType: TaskReconcile, Max: 10, OnlyRollups: onlyRollups}
	}

	// the probe claim_spans runs first, for each kind of claim
	los, his := spanBounds(partitionSpans(0, 255, 0))
	probe := func(fn string) (ords []int32) {
		t.Helper()
		require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT `+fn+`('comp', 'v1', 'reconcile', $1, $2, now())`, los, his).Scan(&ords))
		return ords
	}
	require.Equal(t, []int32{6, 7}, probe("claimable_rollup_spans"), "for rollups only, the probe keeps only the rollups' partitions")
	require.Len(t, probe("claimable_spans"), 7, "otherwise, every partition holding a row")

	ts, err := f.st.Claim(f.ctx, all, batch(true))
	require.NoError(t, err)
	require.Len(t, ts, 2)
	require.ElementsMatch(t, []uuid.UUID{r1, r2}, []uuid.UUID{ts[0].Resource.ID, ts[1].Resource.ID})
	require.True(t, ts[0].IsRollup() && ts[1].IsRollup())

	ts, err = f.st.Claim(f.ctx, all, batch(true))
	require.NoError(t, err)
	require.Empty(t, ts, "no rollup is left, and nothing else is taken")
	ts, err = f.st.Claim(f.ctx, all, batch(false))
	require.NoError(t, err)
	require.Len(t, ts, 5, "the others are there for a full claim")
}

func TestClaim_TakesOnlyDueRowsInItsRange(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	id := f.res("leaf", "a")
	f.schedule(id)
	shard := scalar[int](f, `SELECT shard_id FROM resources WHERE id = $1`, id)

	other := Lease{WorkerID: "w", Lo: (shard + 16) % 256, Hi: (shard + 16) % 256}
	ts, err := f.st.Claim(f.ctx, other, Batch{Kind: "leaf", Version: "v1", TaskType: TaskReconcile, Max: 10})
	require.NoError(t, err)
	require.Empty(t, ts, "a claimer sees only its shard range")

	f.exec(`UPDATE work_queue SET not_before = now() + interval '1 hour'`)
	require.Empty(t, f.claim("leaf", 10), "not_before in the future")
	f.st.Clock = func() time.Time { return time.Now().Add(2 * time.Hour) }
	require.Len(t, f.claim("leaf", 10), 1, "due once the clock passes not_before")
}

func TestClaim_EightConcurrentClaimersNeverDoubleClaim(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	const n = 400
	f.exec(`INSERT INTO resources (id, kind, version, name, shard_id)
	        SELECT id, 'leaf', 'v1', 'r-' || i, shard_of(id) FROM (SELECT gen_random_uuid() AS id, i FROM generate_series(1, $1) i) x`, n)
	f.exec(`SELECT schedule_eligible(array_agg(id)) FROM resources`)

	var mu sync.Mutex
	seen := map[uuid.UUID]int{}
	epochs := map[int64]string{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease := Lease{WorkerID: fmt.Sprintf("w%d", c), Lo: 0, Hi: 255}
			for {
				ts, err := f.st.Claim(context.Background(), lease, Batch{Kind: "leaf", Version: "v1", TaskType: TaskReconcile, Max: 7})
				if err != nil {
					errs <- err
					return
				}
				if len(ts) == 0 {
					return
				}
				mu.Lock()
				for _, task := range ts {
					seen[task.Key.ResourceID]++
					if w, ok := epochs[task.ClaimEpoch]; ok && w != lease.WorkerID {
						errs <- fmt.Errorf("epoch %d shared by %s and %s", task.ClaimEpoch, w, lease.WorkerID)
					}
					epochs[task.ClaimEpoch] = lease.WorkerID
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, seen, n, "every task claimed")
	for id, c := range seen {
		require.Equal(t, 1, c, "task %s claimed %d times", id, c)
	}
}

func TestClaim_CapHoldsAcrossConcurrentClaimers(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("capped", reactWorker, `"max_inflight": 5`)
	f.exec(`INSERT INTO resources (id, kind, version, name, shard_id)
	        SELECT id, 'capped', 'v1', 'r-' || i, shard_of(id) FROM (SELECT gen_random_uuid() AS id, i FROM generate_series(1, 200) i) x`)
	f.exec(`SELECT schedule_eligible(array_agg(id)) FROM resources`)

	claimers := []Lease{{"c0", 0, 63}, {"c1", 64, 127}, {"c2", 128, 191}, {"c3", 192, 255}}
	var mu sync.Mutex
	var held []Task
	var wg sync.WaitGroup
	for _, l := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				ts, err := f.st.Claim(context.Background(), l, Batch{Kind: "capped", Version: "v1", TaskType: TaskReconcile, Max: 3})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				held = append(held, ts...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, held, 5, "the cap of 5 holds across claimers on different shard ranges")
	require.Equal(t, 5, scalar[int](f, `SELECT count(*) FROM work_queue WHERE worker_id IS NOT NULL`))
	require.EqualValues(t, 5, scalar[int64](f, `SELECT sum(in_flight) FROM kind_inflight WHERE kind = 'capped'`))

	// Finishing two gives their slots back (the drain's partial); releasing
	// one gives its slot back too (the claimer's partial).
	f.finish(held[0].Result(nil), held[1].Result(nil))
	n, err := f.st.Release(f.ctx, Lease{WorkerID: all.WorkerID, Lo: 0, Hi: 255}, []TaskKey{held[2].Key})
	require.NoError(t, err)
	require.Zero(t, n, "only the holder can release")
	var holder Lease
	for _, l := range claimers {
		if held[2].Key.ShardID >= l.Lo && held[2].Key.ShardID <= l.Hi {
			holder = l
		}
	}
	n, err = f.st.Release(f.ctx, holder, []TaskKey{held[2].Key})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.EqualValues(t, 2, scalar[int64](f, `SELECT sum(in_flight) FROM kind_inflight WHERE kind = 'capped'`))
	more := f.claim("capped", 10)
	require.Len(t, more, 3, "three slots came back")
}

func TestClaim_UncappedKindDoesNoCapWork(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	for i := range 5 {
		f.schedule(f.res("leaf", fmt.Sprintf("r%d", i)))
	}
	require.Len(t, f.claim("leaf", 10), 5)
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM kind_inflight`), "no partial written for an uncapped kind")
}

func TestHeartbeat_StampsOnlyTheHoldersTasks(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.schedule(f.res("leaf", "a"), f.res("leaf", "b"))
	ts := f.claim("leaf", 10)
	require.Len(t, ts, 2)
	f.exec(`UPDATE work_queue SET heartbeat_at = now() - interval '1 hour'`)
	keys := []TaskKey{ts[0].Key, ts[1].Key}
	lo, hi := min(keys[0].ShardID, keys[1].ShardID), max(keys[0].ShardID, keys[1].ShardID)

	n, err := f.st.Heartbeat(f.ctx, "someone-else", lo, hi, keys)
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = f.st.Heartbeat(f.ctx, all.WorkerID, lo, hi, keys)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM work_queue WHERE heartbeat_at < now() - interval '1 minute'`))
}

func TestRelease_MakesTheTaskClaimableAndFencesTheOldResult(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	id := f.res("leaf", "a")
	f.schedule(id)
	first := f.claimOne("leaf")
	n, err := f.st.Release(f.ctx, all, []TaskKey{first.Key})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	second := f.claimOne("leaf")
	require.Greater(t, second.ClaimEpoch, first.ClaimEpoch)
	f.finish(first.Result([]byte(`{"from":"first"}`)))
	require.Equal(t, "Reconciling", f.phase(id), "the released claim's result is fenced out")
	f.finish(second.Result([]byte(`{"from":"second"}`)))
	require.Equal(t, "Ready", f.phase(id))
	require.JSONEq(t, `{"from":"second"}`, scalar[string](f, `SELECT status::text FROM resources WHERE id = $1`, id))
}

func TestClaim_ExplainPrunesANarrowRangeToOnePartition(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	id := f.res("leaf", "r", withID(f.idInShards(0, 5)))
	f.schedule(id)

	conn, plans := explainedConn(f)
	rows, err := conn.Query(f.ctx, claimSQL, "leaf", "v1", "reconcile", 100, 0, 5, "w", nil, 0, false)
	require.NoError(t, err)
	claimed := 0
	for rows.Next() {
		claimed++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 1, claimed)

	stamped := false
	for _, p := range *plans {
		if strings.Contains(p, "work_queue_p") {
			requireOnlyPartition(t, p, "work_queue", 0)
			stamped = stamped || strings.Contains(p, "WITH upd AS")
		}
	}
	require.True(t, stamped, "the stamp's plan was seen")
}

// requireOnlyPartition asserts a plan touches table's partition p and no other.
func requireOnlyPartition(t *testing.T, plan, table string, p int) {
	t.Helper()
	require.Contains(t, plan, fmt.Sprintf("%s_p%d ", table, p), plan)
	for i := range 16 {
		if i != p {
			require.NotContains(t, plan, fmt.Sprintf("%s_p%d ", table, i), plan)
		}
	}
}

// A wide range's starting partition rotates per pair: a broker that claims
// from two pairs in turn (every sweep asks each pair once) must still reach
// every partition of each pair's. With one rotor shared by every claim, each
// pair saw every other rotor value, always started at the same one of two
// partitions, and took its batches only from there while that partition
// could fill them: the other partition's rows waited until it drained.
func TestClaim_EachPairRotatesItsStartingPartition(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	kinds := []string{"a", "b"}
	for _, k := range kinds {
		f.kind(k, reactWorker)
		for p := range 2 {
			for i := range 4 {
				f.schedule(f.res(k, fmt.Sprintf("%s-%d-%d", k, p, i), withID(f.idInShards(16*p, 16*p+15))))
			}
		}
	}
	lease := Lease{WorkerID: "w", Lo: 0, Hi: 31}
	partitions := map[string]map[int]bool{"a": {}, "b": {}}
	for range 2 { // two sweeps, each claiming once from each pair
		for _, k := range kinds {
			ts, err := f.st.Claim(f.ctx, lease, Batch{Kind: k, Version: "v1", TaskType: TaskReconcile, Max: 1})
			require.NoError(t, err)
			require.Len(t, ts, 1)
			partitions[k][ts[0].Key.ShardID/partitionWidth] = true
		}
	}
	for _, k := range kinds {
		require.Len(t, partitions[k], 2, "pair %s's two claims started at the same partition: %v", k, partitions[k])
	}
}

func TestClaim_AcrossPartitionsFillsTheBatchSpanBySpan(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	for _, p := range []int{0, 1, 5} {
		for i := range 3 {
			f.schedule(f.res("leaf", fmt.Sprintf("p%d-%d", p, i), withID(f.idInShards(16*p, 16*p+15))))
		}
	}
	lease := Lease{WorkerID: "w", Lo: 0, Hi: 95}
	ts, err := f.st.Claim(f.ctx, lease, Batch{Kind: "leaf", Version: "v1", TaskType: TaskReconcile, Max: 5})
	require.NoError(t, err)
	require.Len(t, ts, 5, "the batch is filled from a second partition when the first runs out")
	parts := map[int]int{}
	for _, task := range ts {
		parts[task.Key.ShardID/partitionWidth]++
	}
	require.Len(t, parts, 2, "two partitions, one after the other: %v", parts)
	require.Equal(t, 5, scalar[int](f, `SELECT count(*) FROM work_queue WHERE worker_id = 'w'`))

	ts, err = f.st.Claim(f.ctx, lease, Batch{Kind: "leaf", Version: "v1", TaskType: TaskReconcile, Max: 10})
	require.NoError(t, err)
	require.Len(t, ts, 4, "the rest, from wherever it is")
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM work_queue WHERE worker_id IS NULL`))
}

func TestClaim_AcrossPartitionsLeasesNothingWhenOnePartitionFails(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	for _, p := range []int{0, 5} {
		f.schedule(f.res("leaf", fmt.Sprintf("p%d", p), withID(f.idInShards(16*p, 16*p+15))))
	}
	// The stamp of partition 5's rows fails, as a statement on a
	// connection the database dropped would.
	f.exec(`CREATE FUNCTION refuse_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'partition 5 refuses the stamp'; END $$`)
	f.exec(`CREATE TRIGGER refuse_stamp BEFORE UPDATE ON work_queue_p5 FOR EACH ROW EXECUTE FUNCTION refuse_stamp()`)
	lease := Lease{WorkerID: "w", Lo: 0, Hi: 95}
	// Six claims start at each of the range's six partitions in turn, so
	// partition 0's row comes before partition 5's in some of them.
	for range 6 {
		ts, err := f.st.Claim(f.ctx, lease, Batch{Kind: "leaf", Version: "v1", TaskType: TaskReconcile, Max: 10})
		require.ErrorContains(t, err, "partition 5 refuses the stamp")
		require.ErrorContains(t, err, "claim leaf/v1 reconcile (shards 0-95)")
		require.Empty(t, ts)
		require.Zero(t, scalar[int](f, `SELECT count(*) FROM work_queue WHERE worker_id IS NOT NULL`),
			"a claim that failed left a lease nobody runs")
	}
}
