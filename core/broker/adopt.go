package broker

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/store/pipeline"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// leaseAdopter is the store side of adopting a resumed task's lease.
type leaseAdopter interface {
	Adopt(ctx context.Context, workerID string, tasks []pipeline.Held) ([]pipeline.TaskKey, error)
	Release(ctx context.Context, l pipeline.Lease, keys []pipeline.TaskKey) (int, error)
}

// adoptions keeps the leases of tasks a worker resumed on this broker from a
// session with another broker (its Subscribe lists them), so they are never
// orphaned: the claiming broker may be dead (its leases are freed with its
// row) or may no longer hear from the worker, while the result will arrive
// here. Each final-stage task still held under its claim_epoch is adopted
// (its lease moved to this broker, the epoch unchanged) and heartbeated with
// this broker's own tasks until its result arrives (completions.orphan
// writes it and calls done), or the worker's session here ends (then the
// lease is released for a prompt re-claim rather than left to lapse).
// A non-final stage's result cannot finish the task on its own (the task
// re-runs from the start), so it is not adopted.
type adoptions struct {
	id    string
	store leaseAdopter
	tasks *inflight
	// leases verifies a resumed task's lease secret: only a task handed to
	// this worker is adopted.
	leases *leaseKeys
	log    zerolog.Logger
}

// resumed adopts what s's worker reports still running from earlier
// sessions; the handler runs it before it registers the session (bounded by
// adoptWithin: a database that does not answer delays the session that
// long, and the leases not adopted wait for their stale-lease window). A
// resumed task is adopted only with a lease secret issued for it to this
// worker (its credential and worker id): any other worker credential could
// otherwise take over another broker's live lease, and the task would run
// twice. A ref without a secret (an older SDK) is not adopted either; its
// result, redelivered, still applies (fenced on its claim_epoch) if the
// lease holds until then. What is refused is logged once, as counts.
func (a *adoptions) resumed(ctx context.Context, s *session, refs []*workerv1.TaskRef) {
	var held []pipeline.Held
	refused, unsigned := 0, 0
	for _, r := range refs {
		id, err := parseTaskID(r.GetTaskId())
		if err != nil || !id.final || a.tasks.runs(id.key) {
			continue // not ours to adopt, or this broker runs it already
		}
		switch {
		case r.GetLeaseSecret() == "":
			unsigned++
			continue
		case !a.leases.verify(s.holder, r.GetTaskId(), r.GetLeaseSecret()):
			refused++
			continue
		}
		held = append(held, pipeline.Held{Key: id.key, Epoch: id.epoch})
	}
	if refused > 0 {
		a.log.Warn().Str("worker_id", s.workerID).Int("refused", refused).Int("without_secret", unsigned).
			Msg("resumed tasks not adopted: their lease secret was not issued to this worker for them")
	} else if unsigned > 0 {
		a.log.Info().Str("worker_id", s.workerID).Int("without_secret", unsigned).
			Msg("resumed tasks not adopted: the worker sent no lease secret for them (an older SDK)")
	}
	if len(held) == 0 {
		return
	}
	actx, cancel := context.WithTimeout(ctx, adoptWithin)
	defer cancel()
	keys, err := a.store.Adopt(actx, a.id, held)
	a.tasks.adopt(keys, s)
	if err != nil {
		a.log.Warn().Err(err).Int("resumed", len(held)).Int("adopted", len(keys)).
			Msg("adopt the leases of resumed tasks; the rest wait for the stale-lease window")
		return
	}
	a.log.Info().Str("worker_id", s.workerID).Int("resumed", len(held)).Int("adopted", len(keys)).
		Msg("adopted the leases of tasks the worker resumed from another session")
}

// adoptWithin bounds the adoption a session waits for before it starts.
const adoptWithin = 5 * time.Second

// done forgets an adopted task whose result was written.
func (a *adoptions) done(key pipeline.TaskKey) { a.tasks.unadopt(key) }

// ended releases the adopted leases of s's tasks whose results never came.
func (a *adoptions) ended(s *session) {
	keys := a.tasks.unadoptSession(s)
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := a.store.Release(ctx, pipeline.Lease{WorkerID: a.id}, keys); err != nil {
		a.log.Warn().Err(err).Int("tasks", len(keys)).Msg("release adopted leases; the reaper will reclaim them")
	}
}

// refused releases the adopted lease of a task whose redelivered result s's
// worker sent with a secret no key verifies: the result is refused and
// acked (the worker drops it), so nothing would finish the task while the
// session lasts, and its lease, heartbeated here, would never lapse.
// Released, it is claimed and run again at once.
func (a *adoptions) refused(s *session, taskID string) {
	id, err := parseTaskID(taskID)
	if err != nil || !a.tasks.unadoptOf(id.key, s) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := a.store.Release(ctx, pipeline.Lease{WorkerID: a.id}, []pipeline.TaskKey{id.key}); err != nil {
		a.log.Warn().Err(err).Str("task_id", taskID).Msg("release the adopted lease of a refused result; the reaper will reclaim it")
	}
}

// adopt records adopted leases of s's tasks: heartbeated (keys) but not this
// broker's claims (count, pair).
func (f *inflight) adopt(keys []pipeline.TaskKey, s *session) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		f.adopted[k] = s
	}
}

func (f *inflight) unadopt(key pipeline.TaskKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.adopted, key)
}

// unadoptOf forgets key's adoption if s holds it, and reports whether it did.
func (f *inflight) unadoptOf(key pipeline.TaskKey, s *session) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if owner, ok := f.adopted[key]; !ok || owner != s {
		return false
	}
	delete(f.adopted, key)
	return true
}

func (f *inflight) unadoptSession(s *session) []pipeline.TaskKey {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []pipeline.TaskKey
	for k, owner := range f.adopted {
		if owner == s {
			out = append(out, k)
			delete(f.adopted, k)
		}
	}
	return out
}

// runs reports whether this broker runs the task as its own claim.
func (f *inflight) runs(key pipeline.TaskKey) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.running[key]
	return ok
}
