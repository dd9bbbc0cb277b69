package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/lifecycle"
	"github.com/converge-run/converge/core/store/notify"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// reactors is the reactor dispatcher: it claims lifecycle_outbox deliveries
// for the reactor kinds connected workers serve, ships each as a STAGE_REACT
// to a worker, and acknowledges it only after the reactor succeeded. A
// failed reactor is not acknowledged; its claim lapses and the reaper re-arms
// it (at-least-once per binding; DedupToken lets sinks stay idempotent).
func (b *Broker) reactors(ctx context.Context) {
	if b.Lifecycle == nil {
		return
	}
	var wake <-chan notify.Event
	if b.Listener != nil {
		sub := b.Listener.Subscribe("lifecycle_ready", 1)
		defer sub.Close()
		wake = sub.C
	}
	var mu sync.Mutex
	inflight := map[lifecycle.Key]lifecycle.Delivery{}
	go func() { // keep slow reactors' claims alive
		t := time.NewTicker(b.HeartbeatEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			mu.Lock()
			ds := make([]lifecycle.Delivery, 0, len(inflight))
			for _, d := range inflight {
				ds = append(ds, d)
			}
			mu.Unlock()
			if _, err := b.Lifecycle.Heartbeat(ctx, b.ID, ds); err != nil && ctx.Err() == nil {
				b.Log.Warn().Err(err).Msg("lifecycle heartbeat failed")
			}
		}
	}()

	wait := b.PollMin
	for ctx.Err() == nil {
		kinds := b.reactorKinds()
		lo, hi, owned := b.Shards.Bounds()
		claimed := 0
		if owned && len(kinds) > 0 {
			mu.Lock()
			room := b.PairCap - len(inflight)
			mu.Unlock()
			ds, err := b.Lifecycle.Claim(ctx, b.ID, kinds, lo, hi, room)
			if err != nil && ctx.Err() == nil {
				b.Log.Error().Err(err).Int("shard_lo", lo).Int("shard_hi", hi).Msg("claim lifecycle deliveries failed")
			}
			claimed = len(ds)
			for _, d := range ds {
				mu.Lock()
				inflight[d.Key] = d
				mu.Unlock()
				go func() {
					defer func() {
						mu.Lock()
						delete(inflight, d.Key)
						mu.Unlock()
						select {
						case b.taskDone <- struct{}{}:
						default:
						}
					}()
					b.deliver(ctx, d)
				}()
			}
		}
		if claimed > 0 {
			wait = b.PollMin
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
			wait = b.PollMin
		case <-b.reg.changed():
			wait = b.PollMin
		case <-time.After(wait):
			wait = min(wait*2, 5*time.Second)
		}
	}
}

// reactorKinds lists the served kinds that declare a reactor reaction.
func (b *Broker) reactorKinds() []string {
	snap := b.Kinds.Snapshot()
	var out []string
	kvs := b.reg.served()
	for kv := range b.mesh.servedByPeers() {
		kvs = append(kvs, kv)
	}
	seen := map[string]bool{}
	for _, kv := range kvs {
		if k, ok := snap.Get(kv); ok && !seen[kv.Kind] {
			seen[kv.Kind] = true
			if _, has := k.Manifest.Reactor(); has {
				out = append(out, kv.Kind)
			}
		}
	}
	return out
}

// deliver ships one delivery and acks it on success.
func (b *Broker) deliver(ctx context.Context, d lifecycle.Delivery) {
	var snap struct {
		ID         string            `json:"id"`
		Kind       string            `json:"kind"`
		Version    string            `json:"version"`
		Name       string            `json:"name"`
		Labels     map[string]string `json:"labels"`
		Spec       json.RawMessage   `json:"spec"`
		Status     json.RawMessage   `json:"status"`
		Generation int64             `json:"generation"`
		OwnerID    *string           `json:"owner_id"`
		Finalizers []string          `json:"finalizers"`
	}
	log := b.Log.With().Str("reactor", d.Reactor).Str("binding", d.Key.Binding).Str("transition", d.Key.Transition).Logger()
	if err := json.Unmarshal(d.Snapshot, &snap); err != nil {
		log.Error().Err(err).Msg("unreadable lifecycle snapshot; dropping the delivery")
		_, _ = b.Lifecycle.Ack(ctx, d)
		return
	}
	var kv manifest.KindVersion
	var reaction manifest.ReactionDecl
	for _, k := range b.Kinds.Snapshot().All() {
		if r, ok := k.Manifest.Reactor(); ok && k.Name == d.Reactor {
			kv, reaction = manifest.KindVersion{Kind: k.Name, Version: k.Version}, r
			break
		}
	}
	if reaction.Name == "" {
		log.Warn().Msg("reactor kind has no applied manifest; leaving the delivery for later")
		return
	}
	res := &workerv1.Resource{Id: snap.ID, Kind: kv.Kind, Version: kv.Version, Name: snap.Name, Labels: snap.Labels,
		SpecJson: snap.Spec, StatusJson: snap.Status, Generation: snap.Generation, Finalizers: snap.Finalizers}
	// The watched resource travels as the reactor task's resource; its own
	// kind is carried by the snapshot and the binding.
	res.Kind = kv.Kind
	if snap.OwnerID != nil {
		res.OwnerId = *snap.OwnerID
	}
	tid := fmt.Sprintf("react|%s|%d", d.Key.DedupToken(), d.ClaimEpoch)
	task := &workerv1.StageTask{TaskId: tid, Fence: &workerv1.Fence{LeaseToken: b.ID, ClaimEpoch: d.ClaimEpoch},
		Stage: workerv1.Stage_STAGE_REACT, Reaction: reaction.Name, Resource: res,
		Request: &workerv1.StageTask_React{React: &workerv1.ReactRequest{Transition: d.Key.Transition, BindingName: d.Key.Binding,
			DedupToken: d.Key.DedupToken(), Generation: d.Key.Generation}}}
	var c *workerv1.StageComplete
	var err error
	if b.reg.serves(kv) {
		c, err = b.dispatchLocal(ctx, kv, task)
	} else {
		c, err = b.relay(ctx, kv, task)
	}
	if err != nil || c == nil {
		return // not acked: re-armed when the claim lapses
	}
	if e := c.GetError(); e != nil {
		log.Warn().Str("error", e.GetMessage()).Msg("reactor failed; the delivery is re-armed when its claim lapses")
		return
	}
	if _, err := b.Lifecycle.Ack(ctx, d); err != nil {
		log.Warn().Err(err).Msg("ack lifecycle delivery; it will be redelivered")
	}
}
