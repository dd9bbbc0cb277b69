package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// options are this package's stack: short leases and redelivery windows, so
// the reaper and redelivery paths finish in seconds, and a 10s drain.
func options() apptest.Options {
	return apptest.Options{Config: func(c *config.Config) { c.ShutdownDrain = 10 * time.Second }, Tune: fastLeases}
}

func fastLeases(p *app.Process, d *app.Duties) {
	if d.Reaper != nil {
		d.Reaper.StaleAfter = 3 * time.Second
		d.Reaper.LifecycleStale = 2 * time.Second
	}
	if p.Broker != nil {
		p.Broker.HeartbeatEvery = 500 * time.Millisecond
		p.Broker.RedeliveryWait = 3 * time.Second
	}
}

// startServer runs one converge (ROLE=all) on a fresh database.
func startServer(t *testing.T) *app.Process {
	t.Helper()
	return apptest.Start(t, options()).Process
}

// applyManifest applies a manifest document.
func applyManifest(t *testing.T, st *store.Store, doc string) {
	t.Helper()
	_, _, err := st.ApplyManifest(context.Background(), []byte(doc))
	require.NoError(t, err)
}

func applyResource(t *testing.T, st *store.Store, kind, name, spec string) resource.Resource {
	t.Helper()
	r, _, err := st.ApplyResource(context.Background(), store.ApplyResourceInput{Kind: kind, Name: name, Spec: json.RawMessage(spec)})
	require.NoError(t, err)
	return r
}

func status(t *testing.T, r resource.Resource) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.Status, &m), "status of %s/%s: %s", r.Kind, r.Name, r.Status)
	return m
}

func js(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprint("marshal: ", err))
	}
	return b
}

// leafCalls counts a leaf provider's calls by resource name.
type leafCalls struct {
	mu sync.Mutex
	n  map[string]int
}

// provider is a leaf provider (leafWork) that counts its calls.
func (c *leafCalls) provider() *apptest.Provider {
	return apptest.NewProvider("leaf", func(ctx context.Context, r worker.Request) (worker.Outcome, error) {
		c.mu.Lock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[r.Resource.Name]++
		c.mu.Unlock()
		return leafWork(ctx, r)
	})
}

// byName is a copy of the counts.
func (c *leafCalls) byName() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// requireEachOnce fails unless n resources ran, each exactly once.
func (c *leafCalls) requireEachOnce(t *testing.T, n int) {
	t.Helper()
	calls := c.byName()
	require.Len(t, calls, n)
	for name, k := range calls {
		require.Equal(t, 1, k, "%s ran once", name)
	}
}
