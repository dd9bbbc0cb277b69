package broker

import (
	"slices"

	"github.com/converge-run/converge/core/kinds"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/core/store/pipeline"
)

// kindSource is the applied kind manifests, as the broker reads them.
type kindSource interface {
	Kind(kv manifest.KindVersion) (store.Kind, bool)
	All() []store.Kind
}

// cacheKinds reads the live kinds.Cache.
type cacheKinds struct{ c *kinds.Cache }

func (k cacheKinds) Kind(kv manifest.KindVersion) (store.Kind, bool) { return k.c.Snapshot().Get(kv) }
func (k cacheKinds) All() []store.Kind                               { return k.c.Snapshot().All() }

// waker subscribes to a NOTIFY channel; stop ends the subscription.
type waker interface {
	subscribe(channel string) (c <-chan notify.Event, stop func())
}

// listenerWaker subscribes on the process's LISTEN connection; a nil
// listener never wakes (the loops fall back to their polls).
type listenerWaker struct{ l *notify.Listener }

func (w listenerWaker) subscribe(channel string) (<-chan notify.Event, func()) {
	if w.l == nil {
		return nil, func() {}
	}
	sub := w.l.Subscribe(channel, 1)
	return sub.C, sub.Close
}

// routes answers what can be claimed and where a stage can go: the kinds
// this broker's workers serve ready, plus those its mesh peers' workers do.
type routes struct {
	reg   *registry
	mesh  *Mesh
	kinds kindSource
}

// served lists the (kind, version) pairs a local worker or a peer serves.
func (r *routes) served() []manifest.KindVersion {
	kvs := r.reg.served()
	for kv := range r.mesh.servedByPeers() {
		if !slices.Contains(kvs, kv) {
			kvs = append(kvs, kv)
		}
	}
	return kvs
}

// pairs lists what to claim: the task types each served kind's manifest can
// run.
func (r *routes) pairs() []pairKey {
	var out []pairKey
	for _, kv := range r.served() {
		k, ok := r.kinds.Kind(kv)
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

// reactorKinds lists the served (kind, version) pairs whose manifest declares
// a reactor reaction: every served version, since a delivery names only its
// reactor kind and must go to a version some worker serves.
func (r *routes) reactorKinds() []manifest.KindVersion {
	var out []manifest.KindVersion
	for _, kv := range r.served() {
		if k, ok := r.kinds.Kind(kv); ok {
			if _, has := k.Manifest.Reactor(); has {
				out = append(out, kv)
			}
		}
	}
	return out
}

// localFree is the free slots of local workers for kv; onlyLocal is false
// when a peer serves kv too (then only the pair cap bounds a claim).
func (r *routes) localFree(kv manifest.KindVersion) (free int, onlyLocal bool) {
	if r.mesh.pick(kv) != nil {
		return 0, false
	}
	return r.reg.capacity(kv), true
}

// changed returns a channel closed at the next routing or capacity change.
func (r *routes) changed() <-chan struct{} { return r.reg.changed() }

// routesChanged returns a channel closed at the next routing change only
// (a worker joining, leaving or changing readiness; the peers changing).
func (r *routes) routesChanged() <-chan struct{} { return r.reg.routesChanged() }
