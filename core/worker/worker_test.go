package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/transport"
	"github.com/converge-run/converge/core/worker"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
	"github.com/converge-run/converge/workerproto/gen/converge/worker/v1/workerv1connect"
)

// scriptBroker is a real Connect WorkerService over HTTP/2 whose behaviour the
// test scripts: it records what the worker sends and sends what it is told.
type scriptBroker struct {
	workerv1connect.UnimplementedWorkerServiceHandler
	srv *httptest.Server

	mu       sync.Mutex
	sessions int
	inbox    chan *workerv1.WorkStreamRequest
	outbox   chan *workerv1.WorkStreamResponse
	kill     chan struct{} // closing it ends the current stream
	config   *workerv1.ProviderConfig
	acks     bool // advertise ResultAck support in Subscribed
	batches  bool // advertise batched messages in Subscribed
	// compositions advertises compositions in columns in Subscribed.
	compositions bool
	// keepaliveMs is the Subscribed.keepalive_ms asked for (0: none).
	keepaliveMs int64
	// configHangs makes GetProviderConfig answer nothing until its caller
	// gives up (a broker whose database read hangs).
	configHangs bool
	// streamsEnded hears of each stream whose worker side ended, once
	// everything the worker sent on it is in inbox.
	streamsEnded chan struct{}
}

func newScriptBroker(t *testing.T) *scriptBroker {
	t.Helper()
	b := newUnstartedScriptBroker(t)
	b.srv.Start()
	t.Cleanup(b.srv.Close)
	return b
}

// newUnstartedScriptBroker is a script broker whose server the caller
// configures and starts.
func newUnstartedScriptBroker(t *testing.T) *scriptBroker {
	t.Helper()
	b := &scriptBroker{
		inbox:        make(chan *workerv1.WorkStreamRequest, 256),
		streamsEnded: make(chan struct{}, 64),
		outbox:       make(chan *workerv1.WorkStreamResponse, 256),
		kill:         make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.Handle(workerv1connect.NewWorkerServiceHandler(b))
	b.srv = httptest.NewUnstartedServer(mux)
	b.srv.Config.Protocols = transport.ServerProtocols()
	return b
}

func (b *scriptBroker) GetProviderConfig(ctx context.Context, req *connect.Request[workerv1.GetProviderConfigRequest]) (*connect.Response[workerv1.GetProviderConfigResponse], error) {
	b.mu.Lock()
	hangs := b.configHangs
	b.mu.Unlock()
	if hangs {
		<-ctx.Done()
		return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.config == nil || b.config.GetKind() != req.Msg.GetKind() {
		return connect.NewResponse(&workerv1.GetProviderConfigResponse{}), nil
	}
	return connect.NewResponse(&workerv1.GetProviderConfigResponse{Found: true, Config: b.config}), nil
}

func (b *scriptBroker) WorkStream(ctx context.Context, s *connect.BidiStream[workerv1.WorkStreamRequest, workerv1.WorkStreamResponse]) error {
	b.mu.Lock()
	b.sessions++
	kill, acks, batches, keepalive, compositions := b.kill, b.acks, b.batches, b.keepaliveMs, b.compositions
	b.mu.Unlock()
	first, err := s.Receive()
	if err != nil {
		return err
	}
	b.inbox <- first
	if err := s.Send(&workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Subscribed{
		Subscribed: &workerv1.Subscribed{BrokerId: "script", AcksResults: acks, Batches: batches, KeepaliveMs: keepalive,
			CompactCompositions: compositions}}}); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() {
		defer func() { b.streamsEnded <- struct{}{} }()
		for {
			m, err := s.Receive()
			if err != nil {
				errc <- err
				return
			}
			b.inbox <- m
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-kill:
			return connect.NewError(connect.CodeUnavailable, errors.New("broker restarting"))
		case err := <-errc:
			return err
		case m := <-b.outbox:
			if err := s.Send(m); err != nil {
				return err
			}
		}
	}
}

// killStream ends the current stream; the next session gets a fresh kill switch.
func (b *scriptBroker) killStream() {
	b.mu.Lock()
	close(b.kill)
	b.kill = make(chan struct{})
	b.mu.Unlock()
}

func (b *scriptBroker) send(task *workerv1.StageTask) {
	b.outbox <- &workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Task{Task: task}}
}

// next waits for the next worker message matching pred.
func (b *scriptBroker) next(t *testing.T, what string, pred func(*workerv1.WorkStreamRequest) bool) *workerv1.WorkStreamRequest {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case m := <-b.inbox:
			if pred(m) {
				return m
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func isComplete(id string) func(*workerv1.WorkStreamRequest) bool {
	return func(m *workerv1.WorkStreamRequest) bool { return m.GetComplete().GetTaskId() == id }
}

// fakeProvider is a provider whose handler the test supplies.
type fakeProvider struct {
	kv      manifest.KindVersion
	ready   atomic.Bool
	work    func(context.Context, worker.Request) (worker.Outcome, error)
	configs chan worker.ProviderConfig
}

func newProvider(kind string, work func(context.Context, worker.Request) (worker.Outcome, error)) *fakeProvider {
	p := &fakeProvider{kv: manifest.KindVersion{Kind: kind, Version: "v1"}, work: work, configs: make(chan worker.ProviderConfig, 16)}
	p.ready.Store(true)
	return p
}

func (p *fakeProvider) Kind() manifest.KindVersion { return p.kv }
func (p *fakeProvider) Work(ctx context.Context, r worker.Request) (worker.Outcome, error) {
	return p.work(ctx, r)
}
func (p *fakeProvider) OnConfig(c worker.ProviderConfig) { p.configs <- c }
func (p *fakeProvider) Ready() bool                      { return p.ready.Load() }

func task(id, kind string, epoch int64, deadlineMs int64) *workerv1.StageTask {
	return &workerv1.StageTask{
		TaskId:         id,
		Fence:          &workerv1.Fence{LeaseToken: "lease", ClaimEpoch: epoch, ManifestGen: 1},
		Stage:          workerv1.Stage_STAGE_WORK,
		Reaction:       "work",
		TaskDeadlineMs: deadlineMs,
		Resource:       &workerv1.Resource{Id: "r-" + id, Kind: kind, Version: "v1", Name: id, SpecJson: []byte(`{"cidr":"10.0.0.0/16"}`), Generation: 3},
		Request:        &workerv1.StageTask_Work{Work: &workerv1.WorkRequest{Trigger: "specChange"}},
	}
}

// startWorker serves ps to b; it returns a cancel and a channel that
// receives Serve's result.
func startWorker(t *testing.T, b *scriptBroker, opts worker.Options, ps ...worker.Provider) (func(), chan error) {
	t.Helper()
	ctx, cancelFn := context.WithCancel(context.Background())
	done := make(chan error, 1)
	if opts.ReadinessEvery == 0 {
		opts.ReadinessEvery = 20 * time.Millisecond
	}
	opts.ReconnectMin = 10 * time.Millisecond
	opts.ReconnectMax = 50 * time.Millisecond
	go func() {
		done <- worker.Serve(ctx, b.srv.URL, opts, ps...)
		close(done) // later receives (cleanup) return at once
	}()
	t.Cleanup(func() {
		cancelFn()
		select {
		case err := <-done:
			if err != nil {
				t.Logf("worker stopped: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("worker did not stop")
		}
	})
	return cancelFn, done
}

func TestServe_RunsTaskAndEchoesFence(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	p := newProvider("vpc", func(_ context.Context, r worker.Request) (worker.Outcome, error) {
		var spec struct{ CIDR string }
		if err := json.Unmarshal(r.Resource.Spec, &spec); err != nil {
			return worker.Outcome{}, err
		}
		return worker.Outcome{Status: json.RawMessage(`{"vpc_id":"vpc-` + r.Resource.Name + `","cidr":"` + spec.CIDR + `"}`)}, nil
	})
	startWorker(t, b, worker.Options{}, p)

	sub := b.next(t, "subscribe", func(m *workerv1.WorkStreamRequest) bool { return m.GetSubscribe() != nil }).GetSubscribe()
	require.Len(t, sub.GetKinds(), 1)
	require.Equal(t, "vpc", sub.GetKinds()[0].GetKind().GetKind())
	require.True(t, sub.GetKinds()[0].GetReady())

	b.send(task("t1", "vpc", 41, 0))
	c := b.next(t, "completion", isComplete("t1")).GetComplete()
	require.Equal(t, int64(41), c.GetFence().GetClaimEpoch(), "the fence is echoed")
	require.Equal(t, "r-t1", c.GetResourceId())
	require.JSONEq(t, `{"vpc_id":"vpc-t1","cidr":"10.0.0.0/16"}`, string(c.GetOutcome().GetStatusJson()))
}

func TestServe_ErrorsAreTerminalOrTransientAndPanicsStayInTheirTask(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	p := newProvider("vpc", func(_ context.Context, r worker.Request) (worker.Outcome, error) {
		switch r.Resource.Name {
		case "terminal":
			return worker.Outcome{}, worker.Terminal(errors.New("cidr overlaps"))
		case "transient":
			return worker.Outcome{}, errors.New("api throttled")
		case "panic":
			panic("nil map")
		}
		return worker.Outcome{Status: json.RawMessage(`{}`)}, nil
	})
	startWorker(t, b, worker.Options{}, p)
	cases := []struct {
		reason, name string
		wantErr      string
		terminal     bool
	}{
		{reason: "a Terminal error stops retries", name: "terminal", wantErr: "cidr overlaps", terminal: true},
		{reason: "a plain error is transient", name: "transient", wantErr: "api throttled"},
		{reason: "a panic fails only its own task, as transient", name: "panic", wantErr: "panicked: nil map"},
		{reason: "the worker keeps serving after a panic", name: "fine"},
	}
	for i, tc := range cases {
		b.send(task(tc.name, "vpc", int64(i+1), 0))
		c := b.next(t, tc.name, isComplete(tc.name)).GetComplete()
		if tc.wantErr == "" {
			require.NotNil(t, c.GetOutcome(), tc.reason)
			continue
		}
		require.Contains(t, c.GetError().GetMessage(), tc.wantErr, tc.reason)
		require.Equal(t, tc.terminal, c.GetError().GetTerminal(), tc.reason)
	}
}

func TestServe_DeadlineCancelsTheHandler(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	p := newProvider("vpc", func(ctx context.Context, _ worker.Request) (worker.Outcome, error) {
		<-ctx.Done()
		return worker.Outcome{}, ctx.Err()
	})
	startWorker(t, b, worker.Options{}, p)
	b.send(task("slow", "vpc", 1, 50))
	c := b.next(t, "completion", isComplete("slow")).GetComplete()
	require.Contains(t, c.GetError().GetMessage(), "deadline")
	require.False(t, c.GetError().GetTerminal(), "a deadline is a transient failure")
}

func TestServe_ReadinessChangesAreReportedLive(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	vpc := newProvider("vpc", nil)
	vpc.ready.Store(false)
	db := newProvider("db", nil)
	startWorker(t, b, worker.Options{}, vpc, db)
	sub := b.next(t, "subscribe", func(m *workerv1.WorkStreamRequest) bool { return m.GetSubscribe() != nil }).GetSubscribe()
	ready := map[string]bool{}
	for _, k := range sub.GetKinds() {
		ready[k.GetKind().GetKind()] = k.GetReady()
	}
	require.Equal(t, map[string]bool{"vpc": false, "db": true}, ready, "an unready provider is advertised unready, the others ready")

	vpc.ready.Store(true)
	up := b.next(t, "readiness update", func(m *workerv1.WorkStreamRequest) bool { return m.GetReadiness() != nil }).GetReadiness()
	for _, k := range up.GetKinds() {
		require.True(t, k.GetReady(), k.GetKind().GetKind())
	}
}

func TestServe_ResultComputedWhileDisconnectedIsRedelivered(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	p := newProvider("vpc", func(context.Context, worker.Request) (worker.Outcome, error) {
		started <- struct{}{}
		<-release
		return worker.Outcome{Status: json.RawMessage(`{"done":true}`)}, nil
	})
	startWorker(t, b, worker.Options{}, p)
	b.next(t, "subscribe", func(m *workerv1.WorkStreamRequest) bool { return m.GetSubscribe() != nil })
	b.send(task("long", "vpc", 7, 0))
	<-started

	b.killStream() // the broker goes away mid-task
	resub := b.next(t, "re-subscribe", func(m *workerv1.WorkStreamRequest) bool { return m.GetSubscribe() != nil }).GetSubscribe()
	require.Len(t, resub.GetResumed(), 1, "the reconnecting worker names the task it still runs")
	require.Equal(t, int64(7), resub.GetResumed()[0].GetFence().GetClaimEpoch())

	close(release)
	c := b.next(t, "redelivered completion", isComplete("long")).GetComplete()
	require.Equal(t, int64(7), c.GetFence().GetClaimEpoch(), "redelivered with its original fence")
	require.JSONEq(t, `{"done":true}`, string(c.GetOutcome().GetStatusJson()))
}

func TestServe_ShutdownDrainsRunningTasks(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	p := newProvider("vpc", func(ctx context.Context, _ worker.Request) (worker.Outcome, error) {
		started <- struct{}{}
		select {
		case <-release:
			return worker.Outcome{Status: json.RawMessage(`{"drained":true}`)}, nil
		case <-ctx.Done():
			return worker.Outcome{}, ctx.Err()
		}
	})
	// The readiness ticker never fires here: the drain itself must tell.
	cancel, done := startWorker(t, b, worker.Options{DrainTimeout: 20 * time.Second, ReadinessEvery: time.Hour}, p)
	b.next(t, "subscribe", func(m *workerv1.WorkStreamRequest) bool { return m.GetSubscribe() != nil })
	b.send(task("inflight", "vpc", 9, 0))
	<-started

	cancel()
	up := b.next(t, "unready on drain", func(m *workerv1.WorkStreamRequest) bool { return m.GetReadiness() != nil }).GetReadiness()
	require.False(t, up.GetKinds()[0].GetReady(), "a draining worker advertises its kinds unready")
	select {
	case err := <-done:
		t.Fatalf("Run returned before its in-flight task finished: %v", err)
	default:
	}
	close(release)
	c := b.next(t, "drained completion", isComplete("inflight")).GetComplete()
	require.JSONEq(t, `{"drained":true}`, string(c.GetOutcome().GetStatusJson()))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after draining")
	}
}

func TestServe_DefaultConfigIsPrimedPushedAndMerged(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	b.config = &workerv1.ProviderConfig{Kind: "vpc", Name: "default", IsDefault: true, Revision: 1,
		SpecJson: []byte(`{"region":"eu-west-1","bucket":"a"}`), DataJson: []byte(`{"bundle":1}`)}
	seen := make(chan worker.EffectiveConfig, 1)
	p := newProvider("vpc", func(_ context.Context, r worker.Request) (worker.Outcome, error) {
		seen <- r.Config
		return worker.Outcome{}, nil
	})
	startWorker(t, b, worker.Options{}, p)
	primed := <-p.configs
	require.Equal(t, "default", primed.Name, "the default is pulled before the first task")

	tk := task("merge", "vpc", 1, 0)
	tk.Config = &workerv1.ProviderConfig{Kind: "vpc", Name: "team-a", SpecJson: []byte(`{"bucket":"b"}`)}
	b.send(tk)
	eff := <-seen
	require.Equal(t, "team-a", eff.Name)
	require.JSONEq(t, `{"region":"eu-west-1","bucket":"b"}`, string(eff.Spec), "attached spec wins per key over the default")
	require.JSONEq(t, `{"bundle":1}`, string(eff.Data), "no attached bundle keeps the default's")
	b.next(t, "completion", isComplete("merge"))

	b.outbox <- &workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Config{Config: &workerv1.ConfigPush{Kind: "vpc",
		Config: &workerv1.ProviderConfig{Kind: "vpc", Name: "default", IsDefault: true, Revision: 2, SpecJson: []byte(`{"region":"us-east-1"}`)}}}}
	pushed := <-p.configs
	require.JSONEq(t, `{"region":"us-east-1"}`, string(pushed.Spec), "a push live-reconfigures the provider")
}

// A handler reads the claim its call serves from its context: the lease's
// claim_epoch and broker, and the dispatch's task id.
func TestServe_HandlerSeesItsClaim(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	got := make(chan worker.Claim, 1)
	p := newProvider("vpc", func(ctx context.Context, _ worker.Request) (worker.Outcome, error) {
		c, ok := worker.ClaimFrom(ctx)
		if !ok {
			return worker.Outcome{}, errors.New("no claim in the handler's context")
		}
		got <- c
		return worker.Outcome{}, nil
	})
	startWorker(t, b, worker.Options{}, p)
	b.next(t, "subscribe", func(m *workerv1.WorkStreamRequest) bool { return m.GetSubscribe() != nil })

	b.send(task("t1", "vpc", 41, 5000))
	b.next(t, "completion", isComplete("t1"))
	c := <-got
	require.Equal(t, worker.Claim{Epoch: 41, Broker: "lease", TaskID: "t1"}, c)
	_, ok := worker.ClaimFrom(context.Background())
	require.False(t, ok, "no claim outside a handler call")
}

// TestServe_RunsAtMostMaxParallelTasksAtOnce holds every handler until
// the test releases it: the worker starts MaxParallel tasks, then one more
// per finished task, never more at once, and its pool still takes work
// after its goroutines have gone quiet.
func TestServe_RunsAtMostMaxParallelTasksAtOnce(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	const limit, total = 2, 6
	var inFlight, most atomic.Int32
	started := make(chan string, total+2)
	release := make(chan struct{})
	p := newProvider("vpc", func(ctx context.Context, r worker.Request) (worker.Outcome, error) {
		n := inFlight.Add(1)
		for m := most.Load(); n > m; m = most.Load() {
			if most.CompareAndSwap(m, n) {
				break
			}
		}
		started <- r.Resource.Name
		defer inFlight.Add(-1)
		select {
		case <-release:
			return worker.Outcome{Status: json.RawMessage(`{}`)}, nil
		case <-ctx.Done():
			return worker.Outcome{}, ctx.Err()
		}
	})
	startWorker(t, b, worker.Options{MaxParallel: limit}, p)
	b.next(t, "subscribe", func(m *workerv1.WorkStreamRequest) bool { return m.GetSubscribe() != nil })

	waitStarted := func(what string) {
		t.Helper()
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			t.Fatalf("timed out waiting for %s to start", what)
		}
	}
	isAnyComplete := func(m *workerv1.WorkStreamRequest) bool { return m.GetComplete() != nil }
	for i := range total {
		b.send(task(fmt.Sprintf("t%d", i), "vpc", 1, 0))
	}
	for i := range limit {
		waitStarted(fmt.Sprintf("task %d of the first %d", i+1, limit))
	}
	done := map[string]bool{}
	for i := limit; i < total; i++ {
		release <- struct{}{} // one handler returns: one more task may start
		done[b.next(t, "a completion", isAnyComplete).GetComplete().GetTaskId()] = true
		waitStarted(fmt.Sprintf("task %d, after a slot freed", i+1))
	}
	for range limit {
		release <- struct{}{}
		done[b.next(t, "a completion", isAnyComplete).GetComplete().GetTaskId()] = true
	}
	require.Len(t, done, total, "every task completed once")
	require.Equal(t, int32(limit), most.Load(), "at most MaxParallel handlers ran at once, and that many did")

	// The pool's goroutines are idle now; new work still runs.
	b.send(task("late", "vpc", 1, 0))
	waitStarted("a task sent after the others finished")
	release <- struct{}{}
	b.next(t, "the late completion", isComplete("late"))
}

// TestServe_AConfigPullThatHangsDoesNotKeepTheWorkerFromItsSession: the
// default providerconfig pull before a session gives up after its timeout
// (as the TypeScript SDK's, 10 s) and the session opens; the config still
// comes by push. A broker whose config read hung kept the worker from ever
// subscribing before.
func TestServe_AConfigPullThatHangsDoesNotKeepTheWorkerFromItsSession(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	b.configHangs = true
	startWorker(t, b, worker.Options{}, okProvider())
	b.next(t, "a subscribe despite the hung pull", isSubscribe)
	b.send(task("t1", "vpc", 1, 0))
	b.next(t, "the task's result", isComplete("t1"))
}

// TestServe_AnUnknownStageFailsTerminallyWithoutRunning: a task at a stage
// this SDK does not know (a newer broker's) fails terminally, naming it,
// as in the TypeScript SDK; the handler saw Stage "" before and could take
// it for anything.
func TestServe_AnUnknownStageFailsTerminallyWithoutRunning(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	ran := make(chan worker.Stage, 1)
	p := newProvider("vpc", func(_ context.Context, r worker.Request) (worker.Outcome, error) {
		ran <- r.Stage
		return worker.Outcome{}, nil
	})
	startWorker(t, b, worker.Options{}, p)
	b.next(t, "subscribe", isSubscribe)
	tk := task("future", "vpc", 1, 0)
	tk.Stage = workerv1.Stage(42)
	b.send(tk)
	c := b.next(t, "the answer", isComplete("future")).GetComplete()
	require.True(t, c.GetError().GetTerminal(), "%v", c)
	require.Contains(t, c.GetError().GetMessage(), "unknown stage 42")
	select {
	case s := <-ran:
		t.Fatalf("the handler ran at stage %q", s)
	default:
	}
}
