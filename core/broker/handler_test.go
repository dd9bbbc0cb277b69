package broker

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/metrics"
	"github.com/converge-run/converge/core/store"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
	"github.com/converge-run/converge/workerproto/gen/converge/worker/v1/workerv1connect"
)

var vpcKind = store.Kind{Name: "vpc", Version: "v1", Manifest: manifest.KindManifest{Kind: "vpc", Version: "v1",
	Reactions: []manifest.ReactionDecl{{Name: "work", Trigger: manifest.TriggerSpecChange}}}}

// handlerBundle is a workerService over fakes, served over HTTP/2.
type handlerBundle struct {
	svc     *workerService
	configs *fakeConfigs
	sink    *fakeSink
	stages  *fakeStages
	srv     *httptest.Server
}

func setupHandler(t *testing.T) *handlerBundle {
	t.Helper()
	b := &handlerBundle{
		configs: &fakeConfigs{DefaultFn: func(context.Context, string) (store.ProviderConfig, bool, error) {
			return store.ProviderConfig{}, false, nil
		}},
		sink: &fakeSink{CompleteFn: func(*workerv1.StageComplete) {}},
		stages: &fakeStages{DispatchLocalFn: func(context.Context, manifest.KindVersion, *workerv1.StageTask) (*workerv1.StageComplete, error) {
			return nil, errors.New("unexpected dispatch")
		}},
	}
	log := testLog(t)
	b.svc = &workerService{id: "broker-1", reg: newRegistry(log), kinds: fakeKinds{vpcKind}, configs: b.configs,
		completions: b.sink, stages: b.stages, metrics: metrics.New(), log: log}
	_, h := workerv1connect.NewWorkerServiceHandler(b.svc)
	b.srv = httptest.NewUnstartedServer(h)
	b.srv.EnableHTTP2 = true
	b.srv.StartTLS()
	t.Cleanup(b.srv.Close)
	return b
}

// clients are the Connect and the gRPC protocol, both spoken by the handler.
func (b *handlerBundle) clients() map[string]workerv1connect.WorkerServiceClient {
	return map[string]workerv1connect.WorkerServiceClient{
		"Connect": workerv1connect.NewWorkerServiceClient(b.srv.Client(), b.srv.URL),
		"GRPC":    workerv1connect.NewWorkerServiceClient(b.srv.Client(), b.srv.URL, connect.WithGRPC()),
	}
}

func readiness(kinds ...string) []*workerv1.KindReadiness {
	var out []*workerv1.KindReadiness
	for _, k := range kinds {
		out = append(out, &workerv1.KindReadiness{Kind: &workerv1.KindVersion{Kind: k, Version: "v1"}, Ready: true})
	}
	return out
}

// A session must open with a Subscribe naming the worker and what it serves.
func TestWorkerServiceWorkStream_RefusesABadFirstMessage(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		first  *workerv1.WorkStreamRequest
	}{
		"NotASubscribe": {
			reason: "the first message must be a Subscribe",
			first: &workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Heartbeat{
				Heartbeat: &workerv1.Heartbeat{}}},
		},
		"NoWorkerID": {
			reason: "a session without a worker id cannot be told apart",
			first: &workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{
				Subscribe: &workerv1.Subscribe{Kinds: readiness("vpc")}}},
		},
		"NoKinds": {
			reason: "a worker serving nothing gets nothing",
			first: &workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{
				Subscribe: &workerv1.Subscribe{WorkerId: "w1"}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupHandler(t)
			for proto, c := range b.clients() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				stream := c.WorkStream(ctx)
				require.NoError(t, stream.Send(tc.first), proto)
				_, err := stream.Receive()
				require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%s over %s: %v", tc.reason, proto, err)
				_ = stream.CloseRequest()
				_ = stream.CloseResponse()
				cancel()
			}
			require.Zero(t, b.svc.reg.count(), "a refused session never registers")
		})
	}
}

// A good session is acknowledged with the kinds the broker knows, routes
// completions to the waiting stages and unregisters when the stream ends.
func TestWorkerServiceWorkStream_Session(t *testing.T) {
	t.Parallel()
	b := setupHandler(t)
	got := make(chan *workerv1.StageComplete, 1)
	b.sink.CompleteFn = func(c *workerv1.StageComplete) { got <- c }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := b.clients()["Connect"].WorkStream(ctx)
	require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{
		Subscribe: &workerv1.Subscribe{WorkerId: "w1", Kinds: readiness("vpc", "unknown")}}}))
	resp, err := stream.Receive()
	require.NoError(t, err)
	sub := resp.GetSubscribed()
	require.Equal(t, "broker-1", sub.GetBrokerId())
	require.Len(t, sub.GetKnown(), 1, "only kinds with an applied manifest are known")
	require.Equal(t, "vpc", sub.GetKnown()[0].GetKind())
	require.Eventually(t, func() bool { return b.svc.reg.count() == 1 }, 5*time.Second, time.Millisecond)

	require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Complete{
		Complete: &workerv1.StageComplete{TaskId: "t1"}}}))
	select {
	case c := <-got:
		require.Equal(t, "t1", c.GetTaskId())
	case <-ctx.Done():
		t.Fatal("completion not routed")
	}
	require.NoError(t, stream.CloseRequest())
	require.Eventually(t, func() bool { return b.svc.reg.count() == 0 }, 5*time.Second, time.Millisecond)
	_ = stream.CloseResponse()
}

func TestWorkerServiceGetProviderConfig(t *testing.T) {
	t.Parallel()
	type want struct {
		code  connect.Code // 0: success
		found bool
	}
	cases := map[string]struct {
		reason string
		kind   string
		read   func(context.Context, string) (store.ProviderConfig, bool, error)
		want   want
	}{
		"NoKind": {
			reason: "a request must name its kind",
			want:   want{code: connect.CodeInvalidArgument},
		},
		"StoreDown": {
			reason: "a failed read is retryable and hides its cause",
			kind:   "vpc",
			read: func(context.Context, string) (store.ProviderConfig, bool, error) {
				return store.ProviderConfig{}, false, errors.New("connection reset")
			},
			want: want{code: connect.CodeUnavailable},
		},
		"NoDefault": {
			reason: "a kind without a default is not an error",
			kind:   "vpc",
			read: func(context.Context, string) (store.ProviderConfig, bool, error) {
				return store.ProviderConfig{}, false, nil
			},
		},
		"Default": {
			reason: "the default is served",
			kind:   "vpc",
			read: func(context.Context, string) (store.ProviderConfig, bool, error) {
				return store.ProviderConfig{Kind: "vpc", Name: "default", IsDefault: true}, true, nil
			},
			want: want{found: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupHandler(t)
			if tc.read != nil {
				b.configs.DefaultFn = tc.read
			}
			res, err := b.clients()["Connect"].GetProviderConfig(context.Background(),
				connect.NewRequest(&workerv1.GetProviderConfigRequest{Kind: tc.kind}))
			if tc.want.code != 0 {
				require.Equal(t, tc.want.code, connect.CodeOf(err), "%s: %v", tc.reason, err)
				require.NotContains(t, err.Error(), "connection reset", tc.reason)
				return
			}
			require.NoError(t, err, tc.reason)
			require.Equal(t, tc.want.found, res.Msg.GetFound(), tc.reason)
		})
	}
}

func TestWorkerServiceRelayStage_RefusesWhatItCannotRun(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		task   *workerv1.StageTask
		want   connect.Code
	}{
		"NoTaskID": {
			reason: "a relayed task needs an id to route its completion",
			task:   &workerv1.StageTask{Resource: &workerv1.Resource{Kind: "vpc", Version: "v1"}},
			want:   connect.CodeInvalidArgument,
		},
		"NoResource": {
			reason: "a relayed task needs its resource",
			task:   &workerv1.StageTask{TaskId: "t1"},
			want:   connect.CodeInvalidArgument,
		},
		"NoLocalWorker": {
			reason: "a relay only runs on this broker's own workers",
			task:   &workerv1.StageTask{TaskId: "t1", Resource: &workerv1.Resource{Kind: "vpc", Version: "v1"}},
			want:   connect.CodeUnavailable,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupHandler(t)
			_, err := b.clients()["Connect"].RelayStage(context.Background(),
				connect.NewRequest(&workerv1.RelayStageRequest{Task: tc.task, OriginBroker: "broker-2"}))
			require.Equal(t, tc.want, connect.CodeOf(err), "%s: %v", tc.reason, err)
		})
	}
}
