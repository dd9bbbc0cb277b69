package broker_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/transport"
	"github.com/converge-run/converge/core/worker"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
	"github.com/converge-run/converge/workerproto/gen/converge/worker/v1/workerv1connect"
)

const routeKind = `{"kind":"route","spec_schema":{"type":"object"},
 "reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`

// bearer is a client interceptor presenting token.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		c := next(ctx, spec)
		c.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return c
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// client is a raw WorkerService client of the stack's broker, presenting
// token ("" = none).
func client(t *testing.T, s *apptest.Stack, token string) workerv1connect.WorkerServiceClient {
	t.Helper()
	hc, err := transport.ClientFor(s.BrokerURL(), nil)
	require.NoError(t, err)
	var opts []connect.ClientOption
	if token != "" {
		opts = append(opts, connect.WithInterceptors(bearer(token)))
	}
	return workerv1connect.NewWorkerServiceClient(hc, s.BrokerURL(), opts...)
}

// The attack of the trust-boundary review: a rogue client — here even one
// holding a valid worker credential — subscribes (its kind advertised
// unready, so it is handed nothing) and completes a task the real worker
// holds, by its task id. The broker refuses it (its lease secret was never
// issued to that session); the real worker's result applies.
func TestWorkerPlane_ForgedCompletionIsRefusedAndTheRealResultApplies(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}, 1), make(chan struct{})
	s := apptest.Start(t, apptest.Options{Manifests: []string{routeKind}})
	s.StartWorker(apptest.Worker{Providers: []worker.Provider{apptest.NewProvider("route",
		func(context.Context, worker.Request) (worker.Outcome, error) {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release
			return worker.Outcome{Status: json.RawMessage(`{"route_id":"REAL"}`)}, nil
		})}})
	_, _, err := s.Store.ApplyResource(context.Background(), store.ApplyResourceInput{Kind: "route", Name: "r1", Spec: json.RawMessage(`{}`)})
	require.NoError(t, err)
	select {
	case <-entered:
	case <-time.After(60 * time.Second):
		t.Fatal("the real worker was never handed the task")
	}
	ids := s.Process.Broker.AwaitedTaskIDs()
	require.Len(t, ids, 1, "one stage waits for the real worker")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rogue := client(t, s, apptest.WorkerToken).WorkStream(ctx)
	defer func() { _ = rogue.CloseResponse() }()
	require.NoError(t, rogue.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{Subscribe: &workerv1.Subscribe{
		WorkerId: "rogue", Kinds: []*workerv1.KindReadiness{{Kind: &workerv1.KindVersion{Kind: "route", Version: "v1"}}}}}}))
	first, err := rogue.Receive()
	require.NoError(t, err)
	require.NotNil(t, first.GetSubscribed())
	forged := func(secret string) {
		require.NoError(t, rogue.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Complete{Complete: &workerv1.StageComplete{
			TaskId: ids[0], LeaseSecret: secret, Stage: workerv1.Stage_STAGE_WORK,
			Result: &workerv1.StageComplete_Outcome{Outcome: &workerv1.Outcome{StatusJson: []byte(`{"route_id":"FORGED-BY-ROGUE"}`)}}}}}))
	}
	forged("")                                            // no secret
	forged("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA") // a well-formed guess
	for acked := 0; acked < 2; {
		m, err := rogue.Receive()
		require.NoError(t, err, "the broker answers each forged completion (acked, so the rogue learns nothing)")
		acked += len(m.GetAck().GetTaskIds())
	}
	r, err := s.Store.GetResource(context.Background(), "route", "r1")
	require.NoError(t, err)
	require.NotContains(t, string(r.Status), "FORGED", "the forged result was not applied")
	require.Equal(t, []string{ids[0]}, s.Process.Broker.AwaitedTaskIDs(), "the stage still waits for the real worker")

	close(release)
	r = s.WaitPhase("route", "r1", resource.PhaseReady, 60*time.Second)
	require.JSONEq(t, `{"route_id":"REAL"}`, string(r.Status), "the real result applies")
}

// Every WorkerService procedure needs the right credential: none is
// Unauthenticated, a worker's may not relay, a broker's (mesh) may, and a
// worker token restricted to other kinds may not read this kind's config.
func TestWorkerPlane_CallsWithoutTheRightCredentialAreRefused(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Manifests: []string{routeKind}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	relay := connect.NewRequest(&workerv1.RelayStageRequest{OriginBroker: "evil",
		Task: &workerv1.StageTask{TaskId: "t", Resource: &workerv1.Resource{Kind: "route", Version: "v1"}}})
	config := connect.NewRequest(&workerv1.GetProviderConfigRequest{Kind: "route"})

	_, err := client(t, s, "").RelayStage(ctx, relay)
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "RelayStage without a credential: %v", err)
	_, err = client(t, s, "not-a-token-of-this-plane").RelayStage(ctx, relay)
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "RelayStage with an unknown token: %v", err)
	_, err = client(t, s, apptest.WorkerToken).RelayStage(ctx, relay)
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "a worker may not relay stages: %v", err)
	_, err = client(t, s, apptest.MeshToken).RelayStage(ctx, relay)
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "a peer broker passes (no worker serves route here): %v", err)

	_, err = client(t, s, "").GetProviderConfig(ctx, config)
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "GetProviderConfig without a credential: %v", err)
	_, err = client(t, s, apptest.MeshToken).GetProviderConfig(ctx, config)
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "a broker credential is not a worker's: %v", err)
	_, err = client(t, s, apptest.WorkerToken).GetProviderConfig(ctx, config)
	require.NoError(t, err, "a worker reads its kind's config")

	stream := client(t, s, "").WorkStream(ctx)
	_ = stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{Subscribe: &workerv1.Subscribe{
		WorkerId: "anon", Kinds: []*workerv1.KindReadiness{{Kind: &workerv1.KindVersion{Kind: "route", Version: "v1"}, Ready: true}}}}})
	_, err = stream.Receive()
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "a session without a credential: %v", err)
	_ = stream.CloseResponse()
}

// A 64 MB request is refused at the message limit, not buffered.
func TestWorkerPlane_OversizedMessageIsRefused(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Manifests: []string{routeKind}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	big := make([]byte, 17<<20)
	_, err := client(t, s, apptest.WorkerToken).GetProviderConfig(ctx,
		connect.NewRequest(&workerv1.GetProviderConfigRequest{Kind: string(big)}))
	require.Error(t, err)
	require.Contains(t, []connect.Code{connect.CodeResourceExhausted, connect.CodeInvalidArgument}, connect.CodeOf(err), "%v", err)
}

// A worker token restricted to some kinds (added to the running broker's
// file: the credentials hot-reload) may neither subscribe to, read the
// config of, nor flip ready another kind.
func TestWorkerPlane_KindRestrictedTokenServesOnlyItsKinds(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Manifests: []string{routeKind,
		`{"kind":"sink","reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`}})
	const restricted = "restricted-token-0123456789abcdef"
	f, err := os.OpenFile(s.WorkerTokensFile, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(restricted + " sink-only sink\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, s.Process.Plane.Reload())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := client(t, s, restricted)

	_, err = c.GetProviderConfig(ctx, connect.NewRequest(&workerv1.GetProviderConfigRequest{Kind: "route"}))
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "another kind's config: %v", err)
	_, err = c.GetProviderConfig(ctx, connect.NewRequest(&workerv1.GetProviderConfigRequest{Kind: "sink"}))
	require.NoError(t, err, "its own kind's config")

	kind := func(k string, ready bool) []*workerv1.KindReadiness {
		return []*workerv1.KindReadiness{{Kind: &workerv1.KindVersion{Kind: k, Version: "v1"}, Ready: ready}}
	}
	stream := c.WorkStream(ctx)
	require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{Subscribe: &workerv1.Subscribe{
		WorkerId: "w-route", Kinds: kind("route", true)}}}))
	_, err = stream.Receive()
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "subscribing to another kind: %v", err)
	_ = stream.CloseResponse()

	stream = c.WorkStream(ctx)
	defer func() { _ = stream.CloseResponse() }()
	require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{Subscribe: &workerv1.Subscribe{
		WorkerId: "w-sink", Kinds: kind("sink", true)}}}))
	first, err := stream.Receive()
	require.NoError(t, err)
	require.NotNil(t, first.GetSubscribed())
	apptest.WaitFor(t, 30*time.Second, "the sink session is served", func() bool {
		return slices.Contains(s.Process.Broker.Served(), "sink/v1")
	})
	require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Readiness{
		Readiness: &workerv1.ReadinessUpdate{Kinds: append(kind("sink", true), kind("route", true)...)}}}))
	// A readiness update that flips a permitted kind is applied in order
	// after the refused one: once sink reads unready, route was not taken.
	require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Readiness{
		Readiness: &workerv1.ReadinessUpdate{Kinds: kind("sink", false)}}}))
	apptest.WaitFor(t, 30*time.Second, "the permitted update applies", func() bool {
		return !slices.Contains(s.Process.Broker.Served(), "sink/v1")
	})
	require.NotContains(t, s.Process.Broker.Served(), "route/v1", "the refused update did not route another kind here")
}

// A worker token removed from WORKER_TOKENS_FILE (or narrowed to other
// kinds) ends the sessions it opened once the broker reads the file again:
// revoking a leaked token must not leave its holder serving (and being
// handed) work on the stream it already has. A session whose token stays
// valid is left alone.
func TestWorkerPlane_RevokedTokenEndsItsLiveSession(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Manifests: []string{routeKind}})
	base, err := os.ReadFile(s.WorkerTokensFile)
	require.NoError(t, err)
	const leaked, narrowed = "leaked-token-0123456789abcdef", "narrowed-token-0123456789abcdef"
	withTokens := func(lines string) {
		t.Helper()
		require.NoError(t, os.WriteFile(s.WorkerTokensFile, append(slices.Clone(base), lines...), 0o600))
		require.NoError(t, s.Process.Plane.Reload())
	}
	withTokens(leaked + " leaked\n" + narrowed + " narrowed route\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	open := func(token, id string) *connect.BidiStreamForClient[workerv1.WorkStreamRequest, workerv1.WorkStreamResponse] {
		t.Helper()
		stream := client(t, s, token).WorkStream(ctx)
		t.Cleanup(func() { _ = stream.CloseResponse() })
		require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{Subscribe: &workerv1.Subscribe{
			WorkerId: id, Kinds: []*workerv1.KindReadiness{{Kind: &workerv1.KindVersion{Kind: "route", Version: "v1"}}}}}}))
		first, err := stream.Receive()
		require.NoError(t, err)
		require.NotNil(t, first.GetSubscribed())
		return stream
	}
	kept, revoked, narrow := open(apptest.WorkerToken, "w-kept"), open(leaked, "w-leaked"), open(narrowed, "w-narrowed")
	ended := func(stream *connect.BidiStreamForClient[workerv1.WorkStreamRequest, workerv1.WorkStreamResponse]) <-chan error {
		done := make(chan error, 1)
		go func() {
			for {
				if _, err := stream.Receive(); err != nil {
					done <- err
					return
				}
			}
		}()
		return done
	}
	keptEnd, revokedEnd, narrowEnd := ended(kept), ended(revoked), ended(narrow)

	withTokens(narrowed + " narrowed sink\n") // leaked is gone, narrowed no longer serves route
	for name, end := range map[string]<-chan error{"revoked": revokedEnd, "narrowed": narrowEnd} {
		select {
		case err := <-end:
			require.Error(t, err, name)
		case <-time.After(30 * time.Second):
			t.Fatalf("the %s token's session is still open 30 s after the broker read the file", name)
		}
	}
	// The untouched token's session still serves: its readiness is heard.
	require.NoError(t, kept.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Readiness{
		Readiness: &workerv1.ReadinessUpdate{Kinds: []*workerv1.KindReadiness{
			{Kind: &workerv1.KindVersion{Kind: "route", Version: "v1"}, Ready: true}}}}}))
	apptest.WaitFor(t, 30*time.Second, "the kept session serves route", func() bool {
		return slices.Contains(s.Process.Broker.Served(), "route/v1")
	})
	select {
	case err := <-keptEnd:
		t.Fatalf("the session of a token still listed ended: %v", err)
	default:
	}
	_, err = client(t, s, leaked).GetProviderConfig(ctx, connect.NewRequest(&workerv1.GetProviderConfigRequest{Kind: "route"}))
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "the revoked token opens nothing new: %v", err)
}
