package apptest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	leafKind = `{"kind":"leaf","spec_schema":{"type":"object"},
 "reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`
	pairKind = `{"kind":"pair","spec_schema":{"type":"object"},
 "reactions":[{"name":"compose","trigger":"specChange","emits":["children","status"]},
              {"name":"rollup","trigger":"childrenSettled","emits":["status"]}]}`
)

func leaf(context.Context, worker.Request) (worker.Outcome, error) {
	return worker.Outcome{Status: json.RawMessage(`{"ok":true}`)}, nil
}

// pair composes two leaves.
func pair(_ context.Context, r worker.Request) (worker.Outcome, error) {
	if r.Stage == worker.StageRollup {
		return worker.Outcome{Status: json.RawMessage(`{"rolled":true}`)}, nil
	}
	out := worker.Outcome{Status: json.RawMessage(`{}`)}
	for i := range 2 {
		out.Children = append(out.Children, worker.Child{Kind: "leaf", Name: fmt.Sprintf("%s-%d", r.Resource.Name, i), Spec: json.RawMessage(`{}`)})
	}
	return out, nil
}

func TestStart_ServesWorkersAndWaitsOnConditions(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{
		Manifests: []string{leafKind, pairKind},
		Workers:   []apptest.Worker{{Providers: []worker.Provider{apptest.NewProvider("leaf", leaf), apptest.NewProvider("pair", pair)}}},
	})
	require.Len(t, s.Processes, 1)
	require.Equal(t, config.RoleAll, s.Process.Config.Role, "the default role")
	require.Equal(t, "test", s.Process.Config.Version, "the default version")
	require.Equal(t, s.APIURL(), s.BrokerURL(), "without BROKER_ADDR the broker shares the API listener")

	_, _, err := s.Store.ApplyResource(context.Background(), store.ApplyResourceInput{Kind: "pair", Name: "p", Spec: json.RawMessage(`{}`)})
	require.NoError(t, err)
	root, below := s.WaitSubtree("pair", "p", 90*time.Second, apptest.AllIn(resource.PhaseReady))
	require.JSONEq(t, `{"rolled":true}`, string(root.Status))
	require.Len(t, below, 2, "both composed leaves are read")
	require.Equal(t, resource.PhaseReady, s.WaitPhase("leaf", "p-1", resource.PhaseReady, time.Second).Phase)
}

func TestStart_ProcessesShareOneDatabase(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Roles: []config.Role{config.RoleControl, config.RoleBroker},
		Config: func(c *config.Config) { c.HeartbeatEvery = 500 * time.Millisecond }})
	require.Len(t, s.Processes, 2)
	require.Equal(t, config.RoleBroker, s.Processes[1].Config.Role)
	require.Nil(t, s.Processes[0].Broker, "a control process runs no broker")
	require.NotNil(t, s.Processes[1].Broker)
	require.Equal(t, 500*time.Millisecond, s.Processes[1].Config.HeartbeatEvery, "Options.Config applies to every process")

	p, stop := s.StartProcess(config.RoleAll)
	stop() // ends early; the test's cleanup does not stop it twice
	require.NotNil(t, p)
}
