package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/converge-run/converge/core/auth"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/metrics"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/pipeline"
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
	// closing ends the broker's sessions (workerService.closing).
	closing chan struct{}
}

func setupHandler(t *testing.T) *handlerBundle {
	t.Helper()
	return setupHandlerAuth(t, nil)
}

// setupHandlerAuth is setupHandler behind the worker-plane interceptor (nil
// pa: an open plane).
func setupHandlerAuth(t *testing.T, pa *planeAuth, tune ...func(*workerService)) *handlerBundle {
	t.Helper()
	b := &handlerBundle{
		configs: &fakeConfigs{DefaultFn: func(context.Context, string) (store.ProviderConfig, bool, error) {
			return store.ProviderConfig{}, false, nil
		}},
		sink: &fakeSink{CompleteFn: func(*workerv1.StageComplete, func()) {}},
		stages: &fakeStages{DispatchLocalFn: func(context.Context, manifest.KindVersion, *workerv1.StageTask) (*workerv1.StageComplete, error) {
			return nil, errors.New("unexpected dispatch")
		}},
		closing: make(chan struct{}),
	}
	log := testLog(t)
	b.svc = &workerService{id: "broker-1", reg: newRegistry(log), kinds: fakeKinds{vpcKind}, configs: b.configs,
		completions: b.sink, stages: b.stages, leases: newLeaseKeys(nil), closing: b.closing, metrics: metrics.New(), log: log}
	for _, f := range tune {
		f(b.svc)
	}
	if pa == nil {
		pa = &planeAuth{log: log}
	}
	_, h := workerv1connect.NewWorkerServiceHandler(b.svc, connect.WithInterceptors(pa))
	b.srv = httptest.NewUnstartedServer(withStreamAbort(withCertificate(auth.CertPolicy{}, h)))
	b.srv.EnableHTTP2 = true
	b.srv.StartTLS()
	t.Cleanup(b.srv.Close)
	return b
}

// secret is the lease secret the handler issued for taskID to an
// anonymous (open-plane) session of workerID.
func (b *handlerBundle) secret(workerID, taskID string) string {
	return b.svc.leases.issue(holderOf(principalFrom(context.Background()), workerID), taskID)
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

// A Subscribe's max_in_flight sizes the session's send queue: above
// WORKER_MAX_IN_FLIGHT, or negative, it is refused with a message naming the
// limit and the value, and the worker never registers; up to it, it is the
// session's bound (unset: 16).
func TestWorkerServiceWorkStream_BoundsMaxInFlight(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason   string
		asked    int32
		wantErr  []string // refused with InvalidArgument naming these
		wantSlot int
	}{
		"Huge": {reason: "one small message must not make the broker allocate gigabytes", asked: 1<<31 - 1,
			wantErr: []string{"WORKER_MAX_IN_FLIGHT (64)", "2147483647"}},
		"JustAbove":  {reason: "the limit is inclusive", asked: 65, wantErr: []string{"WORKER_MAX_IN_FLIGHT (64)", "65"}},
		"Negative":   {reason: "a negative bound is bad input", asked: -3, wantErr: []string{"max_in_flight -3"}},
		"AtTheLimit": {reason: "the limit itself is allowed", asked: 64, wantSlot: 64},
		"Unset":      {reason: "unset takes the default", asked: 0, wantSlot: 16},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupHandlerAuth(t, nil, func(h *workerService) { h.maxInFlight = 64 })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stream := b.clients()["Connect"].WorkStream(ctx)
			t.Cleanup(func() {
				_ = stream.CloseRequest()
				_ = stream.CloseResponse()
			})
			require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{
				Subscribe: &workerv1.Subscribe{WorkerId: "w1", Kinds: readiness("vpc"), MaxInFlight: tc.asked}}}))
			resp, err := stream.Receive()
			if tc.wantErr != nil {
				require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%s: %v", tc.reason, err)
				for _, want := range tc.wantErr {
					require.ErrorContains(t, err, want, tc.reason)
				}
				require.Zero(t, b.svc.reg.count(), "a refused session never registers")
				return
			}
			require.NoError(t, err, tc.reason)
			require.NotNil(t, resp.GetSubscribed())
			require.Eventually(t, func() bool { return b.svc.reg.count() == 1 }, 5*time.Second, time.Millisecond)
			require.Equal(t, tc.wantSlot, b.svc.reg.capacity(manifest.KindVersion{Kind: "vpc", Version: "v1"}), tc.reason)
		})
	}
}

// A good session is acknowledged with the kinds the broker knows, routes
// completions to the waiting stages and unregisters when the stream ends.
func TestWorkerServiceWorkStream_Session(t *testing.T) {
	t.Parallel()
	b := setupHandler(t)
	got := make(chan *workerv1.StageComplete, 1)
	b.sink.CompleteFn = func(c *workerv1.StageComplete, _ func()) { got <- c }
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
		Complete: &workerv1.StageComplete{TaskId: "t1", LeaseSecret: b.secret("w1", "t1")}}}))
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

// A relayed stage's answer tells the relaying broker whether a worker was
// lost: only a worker lost mid-stage is Aborted (counted there against
// max_transient_attempts); a stage no worker took, or any other failure,
// is Unavailable (relayed again, not counted).
func TestWorkerServiceRelayStage_TellsALostWorkerFromAStageNoWorkerTook(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		c      *workerv1.StageComplete
		err    error
		want   connect.Code
	}{
		"LostMidStage": {reason: "the worker was lost mid-stage: a loss the origin counts", err: errLostMidStage,
			want: connect.CodeAborted},
		"NoWorkerTookIt": {reason: "no worker took the stage, or it drained first: nothing lost", want: connect.CodeUnavailable},
		"DispatchFailed": {reason: "the peer could not dispatch it (draining): nothing lost", err: errDraining,
			want: connect.CodeUnavailable},
		"Answered": {reason: "a result goes back", c: &workerv1.StageComplete{TaskId: "t1"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupHandler(t)
			b.stages.DispatchLocalFn = func(context.Context, manifest.KindVersion, *workerv1.StageTask) (*workerv1.StageComplete, error) {
				return tc.c, tc.err
			}
			b.svc.reg.add(&session{id: "w1", maxIn: 1, ready: map[manifest.KindVersion]bool{{Kind: "vpc", Version: "v1"}: true},
				out: make(chan *workerv1.WorkStreamResponse, 1), done: make(chan struct{})})
			res, err := b.clients()["Connect"].RelayStage(context.Background(), connect.NewRequest(&workerv1.RelayStageRequest{
				Task: &workerv1.StageTask{TaskId: "t1", Resource: &workerv1.Resource{Kind: "vpc", Version: "v1"}}, OriginBroker: "broker-2"}))
			if tc.want == 0 {
				require.NoError(t, err, tc.reason)
				require.Equal(t, "t1", res.Msg.GetComplete().GetTaskId())
				return
			}
			require.Equal(t, tc.want, connect.CodeOf(err), "%s: %v", tc.reason, err)
			require.Equal(t, tc.want == connect.CodeAborted, peerLostWorker(err), tc.reason)
		})
	}
}

// Every StageComplete is acked on the stream it came in on once the broker
// answers for it: a stale redelivery (written, and fenced by the drain on its
// claim_epoch), an orphaned mid-pipeline result, a routed one and its
// duplicates when the stage settles it, a late duplicate at once.
func TestWorkerServiceWorkStream_AcksFencedAndDuplicateResults(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{"Connect", "GRPC"} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			b := setupHandler(t)
			var mu sync.Mutex
			var appended []pipeline.Result
			comps := newCompletions(runningWriter(t, func(_ context.Context, rs ...pipeline.Result) error {
				mu.Lock()
				defer mu.Unlock()
				appended = append(appended, rs...)
				return nil
			}), testLog(t))
			b.svc.completions = comps
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stream := b.clients()[proto].WorkStream(ctx)
			defer func() { _ = stream.CloseResponse() }()
			require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{
				Subscribe: &workerv1.Subscribe{WorkerId: "w1", Kinds: readiness("vpc")}}}))
			resp, err := stream.Receive()
			require.NoError(t, err)
			require.True(t, resp.GetSubscribed().GetAcksResults(), "the broker says it acks results")

			tid := func(final bool, epoch int64) string {
				return taskID{key: pipeline.TaskKey{ShardID: 2, ResourceID: uuid.New(), TaskType: pipeline.TaskReconcile},
					epoch: epoch, generation: 1, stage: "STAGE_WORK", final: final}.String()
			}
			complete := func(id string) {
				require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Complete{
					Complete: &workerv1.StageComplete{TaskId: id, Fence: &workerv1.Fence{ClaimEpoch: 3}, LeaseSecret: b.secret("w1", id),
						Result: &workerv1.StageComplete_Outcome{Outcome: &workerv1.Outcome{StatusJson: []byte(`{}`)}}}}}))
			}
			awaitAcks := func(want ...string) {
				t.Helper()
				var got []string
				for len(got) < len(want) {
					m, err := stream.Receive()
					require.NoError(t, err, "waiting for acks of %v (got %v)", want, got)
					got = append(got, m.GetAck().GetTaskIds()...)
				}
				require.ElementsMatch(t, want, got)
			}

			stale := tid(true, 3)
			complete(stale)
			awaitAcks(stale)
			mu.Lock()
			require.Len(t, appended, 1, "the stale redelivery is written for the drain to fence")
			require.Equal(t, int64(3), appended[0].ClaimEpoch)
			mu.Unlock()

			orphan := tid(false, 5)
			complete(orphan)
			awaitAcks(orphan)

			held := tid(true, 6)
			w := comps.expect(held)
			ch := w.ch
			defer comps.forget(held, w)
			complete(held)
			first := <-ch
			complete(held) // a duplicate redelivery of the result the stage holds
			first.ack()    // the stage's write settled: both copies are acked
			awaitAcks(held, held)
			complete(held) // a late duplicate
			awaitAcks(held)
			mu.Lock()
			require.Len(t, appended, 1, "neither copy of the held result was written by completions")
			mu.Unlock()
		})
	}
}

// A stage a peer relays to this broker's worker takes a slot of this
// broker's per-pair cap while it runs (the dispatcher claims that much less
// for itself), and frees it, waking the claim loop, when it ends.
func TestRelayStage_CountsAgainstThisBrokersPairCap(t *testing.T) {
	t.Parallel()
	log := testLog(t)
	reg := newRegistry(log)
	reg.add(&session{id: "w#1", maxIn: 4, ready: map[manifest.KindVersion]bool{kvVPC: true}, done: make(chan struct{})})
	running, finish := make(chan struct{}), make(chan struct{})
	tasks := newInflight()
	svc := &workerService{id: "broker-2", reg: reg, relays: tasks, leases: newLeaseKeys(nil), metrics: metrics.New(), log: log,
		stages: &fakeStages{DispatchLocalFn: func(_ context.Context, _ manifest.KindVersion, task *workerv1.StageTask) (*workerv1.StageComplete, error) {
			close(running)
			<-finish
			return &workerv1.StageComplete{TaskId: task.GetTaskId()}, nil
		}}}
	tk := task(7, pipeline.TaskReconcile)
	id := taskID{key: tk.Key, epoch: 41, generation: 1, stage: workerv1.Stage_STAGE_WORK.String(), final: true}
	done := make(chan error, 1)
	go func() {
		_, err := svc.RelayStage(context.Background(), connect.NewRequest(&workerv1.RelayStageRequest{OriginBroker: "broker-1",
			Task: &workerv1.StageTask{TaskId: id.String(), Resource: &workerv1.Resource{Id: tk.Key.ResourceID.String(), Kind: "vpc", Version: "v1"}}}))
		done <- err
	}()
	<-running
	require.Equal(t, 1, tasks.pair(pairVPC), "the relayed stage counts against the pair")
	require.Zero(t, tasks.count(), "but it is no claim of this broker's: the drain does not wait for it")
	close(finish)
	require.NoError(t, <-done)
	require.Zero(t, tasks.pair(pairVPC))
	select {
	case <-tasks.done:
	default:
		t.Fatal("the freed slot did not wake the claim loop")
	}
}

// A worker that takes batches gets the tasks queued for it in one message
// and may answer them in one; each result is handled (and refused, for a
// bad secret) exactly as if it came alone.
func TestWorkerServiceWorkStream_Batches(t *testing.T) {
	t.Parallel()
	b := setupHandler(t)
	got := make(chan *workerv1.StageComplete, 8)
	b.sink.CompleteFn = func(c *workerv1.StageComplete, _ func()) { got <- c }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := b.clients()["Connect"].WorkStream(ctx)
	defer func() { _ = stream.CloseResponse() }()
	subscribed, s := b.openSession(t, stream, &workerv1.Subscribe{WorkerId: "w1", Kinds: readiness("vpc"), MaxInFlight: 8, Batches: true})
	require.True(t, subscribed.GetBatches(), "the broker says it takes batches")

	// Tasks reach the worker in order, batched or not (whether they share a
	// message depends on what is queued when the sender is free:
	// TestSendOut pins the batching itself).
	for _, id := range []string{"t1", "t2", "t3"} {
		require.NoError(t, s.send(ctx, &workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Task{
			Task: &workerv1.StageTask{TaskId: id}}}))
	}
	var ids []string
	for len(ids) < 3 {
		m, err := stream.Receive()
		require.NoError(t, err)
		if one := m.GetTask(); one != nil {
			ids = append(ids, one.GetTaskId())
		}
		for _, t := range m.GetTasks().GetTasks() {
			ids = append(ids, t.GetTaskId())
		}
	}
	require.Equal(t, []string{"t1", "t2", "t3"}, ids)

	require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Completes{
		Completes: &workerv1.StageCompletes{Completes: []*workerv1.StageComplete{
			{TaskId: "t1", LeaseSecret: b.secret("w1", "t1")},
			{TaskId: "t2", LeaseSecret: "forged"},
			{TaskId: "t3", LeaseSecret: b.secret("w1", "t3")},
		}}}}))
	for _, want := range []string{"t1", "t3"} {
		select {
		case c := <-got:
			require.Equal(t, want, c.GetTaskId(), "results are routed in order; the forged one is refused")
		case <-ctx.Done():
			t.Fatal("batched completion not routed")
		}
	}
	select {
	case c := <-got:
		t.Fatalf("the forged result %s was routed", c.GetTaskId())
	default:
	}
}

// openSession subscribes on stream and returns the broker's Subscribed and
// the session it registered (the test's only one).
func (b *handlerBundle) openSession(t *testing.T, stream *connect.BidiStreamForClient[workerv1.WorkStreamRequest, workerv1.WorkStreamResponse],
	sub *workerv1.Subscribe) (*workerv1.Subscribed, *session) {
	t.Helper()
	require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{Subscribe: sub}}))
	resp, err := stream.Receive()
	require.NoError(t, err)
	require.Eventually(t, func() bool { return b.svc.reg.count() == 1 }, 5*time.Second, time.Millisecond)
	b.svc.reg.mu.Lock()
	defer b.svc.reg.mu.Unlock()
	for _, s := range b.svc.reg.sessions {
		return resp.GetSubscribed(), s
	}
	t.Fatal("no session registered")
	return nil, nil
}

// recordingSender records the messages sendOut sends.
type recordingSender struct {
	sent []*workerv1.WorkStreamResponse
}

func (r *recordingSender) Send(m *workerv1.WorkStreamResponse) error {
	r.sent = append(r.sent, m)
	return nil
}

// ids renders what a sender sent: one entry per message, the task ids of a
// batch joined with "+", a config push as "config".
func (r *recordingSender) ids() []string {
	var out []string
	for _, m := range r.sent {
		switch {
		case m.GetTask() != nil:
			out = append(out, m.GetTask().GetTaskId())
		case m.GetTasks() != nil:
			var ids []string
			for _, t := range m.GetTasks().GetTasks() {
				ids = append(ids, t.GetTaskId())
			}
			out = append(out, strings.Join(ids, "+"))
		default:
			out = append(out, "config")
		}
	}
	return out
}

func TestSendOut(t *testing.T) {
	t.Parallel()
	task := func(id string, specBytes int) *workerv1.WorkStreamResponse {
		return &workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Task{Task: &workerv1.StageTask{TaskId: id,
			Resource: &workerv1.Resource{SpecJson: make([]byte, specBytes)}}}}
	}
	config := &workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Config{Config: &workerv1.ConfigPush{Kind: "vpc"}}}
	many := make([]*workerv1.WorkStreamResponse, maxTaskBatch+1)
	for i := range many {
		many[i] = task("m", 0)
	}
	cases := map[string]struct {
		reason   string
		batches  bool
		first    *workerv1.WorkStreamResponse
		queued   []*workerv1.WorkStreamResponse
		want     []string
		carry    string
		leftOver int
		maxMsg   int
	}{
		"NoBatches": {
			reason: "a worker that did not ask for batches gets one task a message",
			first:  task("a", 0), queued: []*workerv1.WorkStreamResponse{task("b", 0)},
			want: []string{"a"}, leftOver: 1,
		},
		"QueuedTasksShareAMessage": {
			reason:  "what is queued behind the first task goes with it",
			batches: true, first: task("a", 0), queued: []*workerv1.WorkStreamResponse{task("b", 0), task("c", 0)},
			want: []string{"a+b+c"},
		},
		"NothingQueued": {
			reason:  "a lone task goes as a task, never waiting for company",
			batches: true, first: task("a", 0),
			want: []string{"a"},
		},
		"AConfigPushKeepsItsPlace": {
			reason:  "a config push ends the batch and follows it; what is behind it waits for the next send",
			batches: true, first: task("a", 0), queued: []*workerv1.WorkStreamResponse{task("b", 0), config, task("c", 0)},
			want: []string{"a+b", "config"}, leftOver: 1,
		},
		"ABigTaskGoesAlone": {
			reason:  "a task that would take the batch past its bytes goes in a message of its own",
			batches: true, first: task("a", 10), queued: []*workerv1.WorkStreamResponse{task("big", taskBatchBytes), task("c", 0)},
			want: []string{"a", "big"}, leftOver: 1,
		},
		"ATaskThatDoesNotFitStartsTheNextBatch": {
			reason:  "the task that would take the batch past its bytes is returned, to start the next batch",
			batches: true, first: task("a", 2500), queued: []*workerv1.WorkStreamResponse{task("b", 2500), task("c", 0)},
			want: []string{"a"}, carry: "b", leftOver: 1,
		},
		"TheWorkersLimitBoundsTheBatch": {
			reason:  "a worker whose message limit is below a batch's bytes gets batches that fit it",
			batches: true, maxMsg: 1024, first: task("a", 400), queued: []*workerv1.WorkStreamResponse{task("b", 400), task("c", 400)},
			want: []string{"a+b"}, carry: "c",
		},
		"BoundedCount": {
			reason:  "a batch carries at most maxTaskBatch tasks",
			batches: true, first: task("f", 0), queued: many,
			want: []string{"f" + strings.Repeat("+m", maxTaskBatch-1)}, leftOver: 2,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out := make(chan *workerv1.WorkStreamResponse, len(tc.queued))
			for _, m := range tc.queued {
				out <- m
			}
			rec := &recordingSender{}
			carry, err := sendOut(rec, out, tc.first, batchLimit(tc.batches, tc.maxMsg))
			require.NoError(t, err)
			require.Equal(t, tc.want, rec.ids(), tc.reason)
			require.Equal(t, tc.carry, carry.GetTask().GetTaskId(), tc.reason)
			require.Len(t, out, tc.leftOver, tc.reason)
		})
	}
}

// A batch is cut by its bytes so that, with Connect's 5-byte prefix and
// the DATA frame's 9-byte header, it fits the HTTP/2 server's 4 KiB
// connection buffer: one frame, written in line. And it is cut only when
// the next task would not fit.
func TestSendOut_ABatchIsOneInlineFrame(t *testing.T) {
	t.Parallel()
	const n = 2000
	out := make(chan *workerv1.WorkStreamResponse, n)
	largest := 0
	for i := range n {
		m := &workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Task{Task: &workerv1.StageTask{
			TaskId: fmt.Sprint(i), Resource: &workerv1.Resource{SpecJson: make([]byte, (i*7919)%700)}}}}
		largest = max(largest, proto.Size(m.GetTask()))
		out <- m
	}
	rec := &recordingSender{}
	var carry *workerv1.WorkStreamResponse
	for len(out) > 0 || carry != nil {
		m := carry
		if m == nil {
			m = <-out
		}
		var err error
		carry, err = sendOut(rec, out, m, taskBatchBytes)
		require.NoError(t, err)
	}
	sent := 0
	for i, m := range rec.sent {
		size := proto.Size(m)
		require.LessOrEqual(t, 9+5+size, 4<<10, "message %d: %d bytes do not fit one 4 KiB frame with their prefix and header", i, size)
		sent += len(m.GetTasks().GetTasks())
		if m.GetTask() != nil {
			sent++
		}
		if i < len(rec.sent)-1 {
			require.Greater(t, size, taskBatchBytes-batchHeadroom-batchedBytes(largest),
				"message %d was cut at %d bytes with room for the next task", i, size)
		}
	}
	require.Equal(t, n, sent, "every task sent once")
}

// Result acks go in messages that fit the session's limit, every ack once
// and in order; without a limit, in one message.
func TestSendAcks_FitTheSessionsMessageLimit(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{0, 1024} {
		s := &session{maxMsg: limit, ackWake: make(chan struct{}, 1)}
		var want []string
		for i := range 200 {
			id := fmt.Sprintf("task-%03d-%s", i, strings.Repeat("x", 30))
			want = append(want, id)
			s.ack(id)
		}
		rec := &recordingSender{}
		require.NoError(t, sendAcks(rec, s))
		var got []string
		for i, m := range rec.sent {
			if limit > 0 {
				require.LessOrEqual(t, proto.Size(m), limit, "limit %d, message %d", limit, i)
			}
			got = append(got, m.GetAck().GetTaskIds()...)
		}
		require.Equal(t, want, got, "limit %d", limit)
		if limit == 0 {
			require.Len(t, rec.sent, 1)
		} else {
			require.Greater(t, len(rec.sent), 1)
		}
	}
}
