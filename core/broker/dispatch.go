package broker

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/core/store/pipeline"
)

// claimLoop round-robins every (kind, version, task type) that has a
// manifest and a ready worker, claiming batches in this pod's shard range
// while there is work and room, and backing off when idle (a work_ready
// wake, a worker joining or a slot freeing cuts the wait short).
//
// A pair whose claim came back empty is dry for a wake window: a sweep
// triggered only by a finished task (which frees a slot but creates no work)
// skips it, and so does one triggered by a routing change or a freed worker
// slot; a work_ready wake or the idle timer sweeps every pair. The window
// matches notify_gated's, so work whose wake the gate coalesced away is
// still claimed within about one window of arriving, even while another
// pair's completions keep the loop from ever idling.
func (b *Broker) claimLoop(ctx, taskCtx context.Context, wake <-chan notify.Event) {
	wait := b.PollMin
	offset := 0
	dry := map[pairKey]time.Time{}
	for ctx.Err() == nil {
		pairs := b.pairs()
		busy := false
		lo, hi, owned := b.Shards.Bounds()
		if owned && len(pairs) > 0 {
			offset = (offset + 1) % len(pairs)
			for i := range pairs {
				p := pairs[(offset+i)%len(pairs)]
				if until, ok := dry[p]; ok && time.Now().Before(until) {
					continue
				}
				n, err := b.claimPair(ctx, taskCtx, p, lo, hi)
				if err != nil {
					if ctx.Err() == nil {
						b.Log.Error().Err(err).Str("kind", p.kv.String()).Str("task_type", string(p.tt)).
							Int("shard_lo", lo).Int("shard_hi", hi).Msg("claim failed")
					}
					continue
				}
				switch {
				case n > 0:
					busy = true
				case n == 0:
					dry[p] = time.Now().Add(dryWindow)
				}
			}
		}
		if busy {
			wait = b.PollMin
			continue
		}
		changed := b.reg.changed()
		select {
		case <-ctx.Done():
			return
		case <-wake:
			b.Metrics.Wakes.WithLabelValues("work_ready").Inc()
			wait = b.PollMin
			clear(dry)
		case <-changed:
			// A worker joined, left, changed readiness or freed a slot:
			// room to claim, but no new rows, so dry pairs stay dry
			// (every stage's slot release signals here).
			wait = b.PollMin
		case <-b.taskDone:
			wait = b.PollMin
		case <-time.After(wait):
			wait = min(wait*2, b.PollMax)
			clear(dry)
		}
	}
}

// dryWindow is how long an empty pair is skipped by completion-only sweeps:
// notify_gated's coalescing window.
const dryWindow = 50 * time.Millisecond

// pairs lists what to claim: the task types each served kind's manifest can
// run.
func (b *Broker) pairs() []pairKey {
	snap := b.Kinds.Snapshot()
	var out []pairKey
	kvs := b.reg.served()
	for kv := range b.mesh.servedByPeers() {
		if !slices.Contains(kvs, kv) {
			kvs = append(kvs, kv)
		}
	}
	for _, kv := range kvs {
		k, ok := snap.Get(kv)
		if !ok || k.IsReactor {
			continue
		}
		out = append(out, pairKey{kv, pipeline.TaskReconcile}, pairKey{kv, pipeline.TaskDelete})
		if len(k.Manifest.Verbs()) > 0 {
			out = append(out, pairKey{kv, pipeline.TaskOperate})
		}
	}
	return out
}

// claimPair claims up to the room left for one pair and starts its tasks.
// It returns -1 without claiming when the pair has no room worth a claim:
// full, or — with tasks still in flight — less than a quarter of its limit
// free. That hysteresis turns a stream of completions into claims of a
// quarter of the limit each instead of one statement per finished task.
func (b *Broker) claimPair(ctx, taskCtx context.Context, p pairKey, lo, hi int) (int, error) {
	b.mu.Lock()
	inflight := b.perPair[p]
	b.mu.Unlock()
	room, limit := b.PairCap-inflight, b.PairCap
	if b.mesh.pick(p.kv) == nil {
		// Only local workers: claim what they can take.
		free := b.reg.capacity(p.kv)
		room, limit = min(room, free), min(limit, inflight+free)
	}
	if room <= 0 || (inflight > 0 && room < max(1, limit/4)) {
		return -1, nil
	}
	lease := pipeline.Lease{WorkerID: b.ID, Lo: lo, Hi: hi}
	tasks, err := b.Pipeline.Claim(ctx, lease, pipeline.Batch{Kind: p.kv.Kind, Version: p.kv.Version, TaskType: p.tt, Max: room})
	if err != nil {
		return 0, err
	}
	if len(tasks) == 0 {
		return 0, nil
	}
	b.Metrics.Claims.WithLabelValues(p.kv.Kind, string(p.tt)).Add(float64(len(tasks)))
	b.mu.Lock()
	for _, t := range tasks {
		b.running[t.Key] = &running{task: t, lease: lease, pair: p}
	}
	b.perPair[p] += len(tasks)
	b.mu.Unlock()
	for _, t := range tasks {
		go b.runTask(taskCtx, lease, p, t)
	}
	return len(tasks), nil
}

// finish forgets a task and frees its pair slot.
func (b *Broker) finish(p pairKey, key pipeline.TaskKey) {
	b.mu.Lock()
	delete(b.running, key)
	b.perPair[p]--
	b.mu.Unlock()
	select {
	case b.taskDone <- struct{}{}:
	default:
	}
}

// taskID identifies one stage dispatch and carries what a broker needs to
// apply a completion redelivered after its waiter is gone.
type taskID struct {
	key        pipeline.TaskKey
	epoch      int64
	generation int64
	stage      string
	final      bool
	finalizer  string
}

func (t taskID) String() string {
	final := "0"
	if t.final {
		final = "1"
	}
	return strings.Join([]string{"v1", strconv.Itoa(t.key.ShardID), t.key.ResourceID.String(), string(t.key.TaskType),
		t.key.OpID.String(), strconv.FormatInt(t.epoch, 10), strconv.FormatInt(t.generation, 10), t.stage, final,
		url.QueryEscape(t.finalizer)}, "|")
}

func parseTaskID(s string) (taskID, error) {
	f := strings.Split(s, "|")
	if len(f) != 10 || f[0] != "v1" {
		return taskID{}, fmt.Errorf("malformed task id %q", s)
	}
	var t taskID
	var err error
	if t.key.ShardID, err = strconv.Atoi(f[1]); err != nil {
		return taskID{}, fmt.Errorf("task id %q: shard: %w", s, err)
	}
	if t.key.ResourceID, err = uuid.Parse(f[2]); err != nil {
		return taskID{}, fmt.Errorf("task id %q: resource: %w", s, err)
	}
	t.key.TaskType = pipeline.TaskType(f[3])
	if t.key.OpID, err = uuid.Parse(f[4]); err != nil {
		return taskID{}, fmt.Errorf("task id %q: op: %w", s, err)
	}
	if t.epoch, err = strconv.ParseInt(f[5], 10, 64); err != nil {
		return taskID{}, fmt.Errorf("task id %q: epoch: %w", s, err)
	}
	if t.generation, err = strconv.ParseInt(f[6], 10, 64); err != nil {
		return taskID{}, fmt.Errorf("task id %q: generation: %w", s, err)
	}
	t.stage, t.final = f[7], f[8] == "1"
	if t.finalizer, err = url.QueryUnescape(f[9]); err != nil {
		return taskID{}, fmt.Errorf("task id %q: finalizer: %w", s, err)
	}
	return t, nil
}

// kvOf is a task's (kind, version).
func kvOf(t pipeline.Task) manifest.KindVersion {
	return manifest.KindVersion{Kind: t.Resource.Kind, Version: t.Resource.Version}
}
