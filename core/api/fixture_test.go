package api_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/api"
	"github.com/converge-run/converge/core/auth"
	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/db/pgtest"
	"github.com/converge-run/converge/resolvers"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Test tokens (the file format of API_TOKENS_FILE).
const (
	adminToken  = "admin-token-0123456789"
	viewerToken = "viewer-token-0123456789"
)

// env is one test's database, hub and API server.
type env struct {
	t        testing.TB
	ctx      context.Context
	pool     *pgxpool.Pool
	st       *store.Store
	hub      *live.Hub
	listener *notify.Listener
	srv      *httptest.Server
	h        *api.Handler
	stmts    *atomic.Int64 // SQL statements sent through pool (the tracer): the requests' own
}

type envOpt func(*envConfig)

type envConfig struct {
	tokens    *auth.Tokens
	certs     auth.APIIdentities
	serverTLS *tls.Config // nil: plain HTTP
	limits    api.Limits
	log       *zerolog.Logger // nil: none
}

func withTokens() envOpt {
	return func(c *envConfig) {
		t, err := auth.ParseTokens([]byte(adminToken + " admin alice\n" + viewerToken + " viewer dash\n"))
		if err != nil {
			panic(err)
		}
		c.tokens = t
	}
}

func withLimits(l api.Limits) envOpt { return func(c *envConfig) { c.limits = l } }

// withLog gives the handler a logger (the hub and listener log nowhere).
func withLog(l zerolog.Logger) envOpt { return func(c *envConfig) { c.log = &l } }

// statementsOf runs query (e.ok: it must succeed, into out) and returns how
// many SQL statements it sent through the counted pool.
func (e *env) statementsOf(query string, vars map[string]any, out any) int64 {
	e.t.Helper()
	before := e.stmts.Load()
	e.ok(query, vars, out)
	return e.stmts.Load() - before
}

func newEnv(t testing.TB, opts ...envOpt) *env {
	t.Helper()
	var cfg envConfig
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stmts := &atomic.Int64{}
	url := pgtest.URL(t)
	pcfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	pcfg.MaxConns = 20
	pcfg.ConnConfig.Tracer = counter{n: stmts}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	// The listener and the hub poll on timers of their own (members every
	// 100ms, samples, counts): on a pool of their own, so the counted pool
	// sees only what requests run.
	background, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(background.Close)
	t.Cleanup(cancel) // runs first: stops the hub and the listener before the pools close

	log := zerolog.Nop()
	listener := notify.NewListener(background, log)
	hub := live.NewHub(listener, background, log, live.WithOptions(live.Options{
		CountsInterval: 20 * time.Millisecond, MemberPoll: 100 * time.Millisecond}))
	go func() { _ = hub.Run(ctx) }()
	<-hub.Started()
	go func() { _ = listener.Run(ctx) }()
	select {
	case <-listener.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("listener not ready")
	}
	st := store.New(pool, pool)
	hlog := log
	if cfg.log != nil {
		hlog = *cfg.log
	}
	h := api.NewHandler(api.Deps{Schema: resolvers.NewSchema(resolvers.Deps{Store: st, Hub: hub, Version: "v-test",
		AuthRequired: cfg.tokens != nil || cfg.certs.Set(), LoaderWait: cfg.limits.LoaderWait,
		Control: &cluster.Controller{Store: membership.New(pool), Log: log}}), Log: hlog,
		Tokens: cfg.tokens, Certificates: cfg.certs, Limits: cfg.limits})
	srv := httptest.NewUnstartedServer(h)
	if cfg.serverTLS != nil {
		srv.TLS = cfg.serverTLS
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return &env{t: t, ctx: ctx, pool: pool, st: st, hub: hub, listener: listener, srv: srv, h: h, stmts: stmts}
}

// counter counts the statements sent through a pool (queries and batch
// entries).
type counter struct{ n *atomic.Int64 }

func (c counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c counter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, _ pgx.TraceBatchQueryData) {
	c.n.Add(1)
}
func (counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// gqlResponse is a GraphQL response body.
type gqlResponse struct {
	Data   json.RawMessage `json:"data"`
	Errors []gqlError      `json:"errors"`
	status int
}

type gqlError struct {
	Message    string         `json:"message"`
	Extensions map[string]any `json:"extensions"`
}

func (r gqlResponse) code() string {
	if len(r.Errors) == 0 {
		return ""
	}
	c, _ := r.Errors[0].Extensions["code"].(string)
	return c
}

// do POSTs a GraphQL request with an optional bearer token.
func (e *env) do(token, query string, vars map[string]any) gqlResponse {
	e.t.Helper()
	return e.doAs(http.DefaultClient, token, query, vars)
}

// doAs is do through client (one presenting a client certificate, say).
func (e *env) doAs(client *http.Client, token, query string, vars map[string]any) gqlResponse {
	e.t.Helper()
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	require.NoError(e.t, err)
	req, err := http.NewRequestWithContext(e.ctx, http.MethodPost, e.srv.URL+"/graphql", bytes.NewReader(body))
	require.NoError(e.t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	var out gqlResponse
	require.NoError(e.t, json.NewDecoder(resp.Body).Decode(&out))
	out.status = resp.StatusCode
	return out
}

// ok runs query as admin (or on an open API) and decodes data into dst.
func (e *env) ok(query string, vars map[string]any, dst any) {
	e.t.Helper()
	r := e.do(adminToken, query, vars)
	require.Empty(e.t, r.Errors, "query %s", query)
	if dst != nil {
		require.NoError(e.t, json.Unmarshal(r.Data, dst))
	}
}

// manifest applies a kind manifest document.
func (e *env) manifest(doc string) {
	e.t.Helper()
	e.ok(`mutation($m: JSON!) { applyKindManifest(manifest: $m) { name } }`, map[string]any{"m": json.RawMessage(doc)}, nil)
}

// caughtUp returns once the hub has fanned out every change committed
// before the call. A subscriber that joins right after a change may still
// receive it (the hub can be a wake behind; an event is delivered to whoever
// is subscribed when the hub handles it), so a test that expects exactly
// the changes after it subscribes calls this first. It commits a resource
// of a kind of its own and waits for a hub subscriber to receive it: the
// hub reads the announcements in commit order.
func (e *env) caughtUp() {
	e.t.Helper()
	const kind = "hubbarrier"
	e.manifest(`{"kind":"` + kind + `","reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	got := live.SubscribeResources(ctx, e.hub, live.ResourceFilter{Kind: kind}, func(c live.Change) string { return c.Name })
	name := fmt.Sprintf("barrier-%d", time.Now().UnixNano())
	e.apply(kind, name, `{}`)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case n := <-got:
			if n == name {
				return
			}
		case <-deadline:
			e.t.Fatalf("the hub did not deliver %s/%s within 10s", kind, name)
		}
	}
}

const (
	workerKind  = `{"kind":"leaf","reactions":[{"name":"work","trigger":"specChange","emits":["status"]},{"name":"flip","trigger":"operation","emits":["operationOutput"],"verb":"flip"}],"spec_schema":{"type":"object","properties":{"size":{"type":"integer"}}},"config_schema":{"type":"object"}}`
	reactorKind = `{"kind":"notifier","reactions":[{"name":"notify","trigger":"reactor","emits":["sideEffect"]}]}`
)

// apply creates or updates a resource through the API; it returns its id.
func (e *env) apply(kind, name string, spec string, extra ...string) string {
	e.t.Helper()
	in := fmt.Sprintf(`{kind: %q, name: %q, spec: %s %s}`, kind, name, spec, strings.Join(extra, " "))
	var out struct {
		ApplyResource struct{ ID string } `json:"applyResource"`
	}
	e.ok(`mutation { applyResource(input: `+in+`) { id } }`, nil, &out)
	return out.ApplyResource.ID
}

// wsClient is a graphql-transport-ws (or graphql-ws) client on gorilla.
type wsClient struct {
	t    testing.TB
	conn *websocket.Conn
	ws   string
	in   chan wsMsg
	err  chan error
	held map[string][]wsMsg // messages of other operations, read while waiting for one
}

func (e *env) dial(subprotocol string, header http.Header) (*wsClient, *http.Response, error) {
	d := websocket.Dialer{Subprotocols: []string{subprotocol}, HandshakeTimeout: 5 * time.Second}
	conn, resp, err := d.Dial("ws"+strings.TrimPrefix(e.srv.URL, "http")+"/graphql", header)
	if err != nil {
		return nil, resp, err
	}
	e.t.Cleanup(func() { _ = conn.Close() })
	c := &wsClient{t: e.t, conn: conn, ws: subprotocol, in: make(chan wsMsg, 1024), err: make(chan error, 1),
		held: map[string][]wsMsg{}}
	go c.reader()
	return c, resp, nil
}

// connect dials and completes connection_init with payload.
func (e *env) connect(subprotocol string, payload map[string]any) *wsClient {
	e.t.Helper()
	c, _, err := e.dial(subprotocol, nil)
	require.NoError(e.t, err)
	c.send(map[string]any{"type": "connection_init", "payload": payload})
	m := c.next(5 * time.Second)
	require.Equal(e.t, "connection_ack", m.Type, "init answered %+v", m)
	return c
}

type wsMsg struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Payload json.RawMessage `json:"payload"`
}

func (c *wsClient) send(v any) {
	c.t.Helper()
	require.NoError(c.t, c.conn.WriteJSON(v))
}

// next returns the next message that is not a keep-alive, or fails after d.
func (c *wsClient) next(d time.Duration) wsMsg {
	c.t.Helper()
	m, err := c.read(d)
	require.NoError(c.t, err)
	return m
}

// reader runs until the connection fails or closes.
func (c *wsClient) reader() {
	for {
		var m wsMsg
		if err := c.conn.ReadJSON(&m); err != nil {
			c.err <- err
			return
		}
		if m.Type == "ka" || m.Type == "ping" || m.Type == "pong" {
			continue
		}
		c.in <- m
	}
}

var errQuiet = errors.New("no message")

func (c *wsClient) read(d time.Duration) (wsMsg, error) {
	select {
	case m := <-c.in:
		return m, nil
	case err := <-c.err:
		c.err <- err
		return wsMsg{}, err
	case <-time.After(d):
		return wsMsg{}, errQuiet
	}
}

// subscribe starts an operation with id.
func (c *wsClient) subscribe(id, query string, vars map[string]any) {
	typ := "subscribe"
	if c.ws == "graphql-ws" {
		typ = "start"
	}
	c.send(map[string]any{"type": typ, "id": id, "payload": map[string]any{"query": query, "variables": vars}})
}

func (c *wsClient) stop(id string) {
	typ := "complete"
	if c.ws == "graphql-ws" {
		typ = "stop"
	}
	c.send(map[string]any{"type": typ, "id": id})
}

// nextFor returns the next message of operation id, holding back the
// messages of other operations.
func (c *wsClient) nextFor(id string, d time.Duration) wsMsg {
	c.t.Helper()
	m, err := c.tryNextFor(id, d)
	require.NoError(c.t, err, "waiting for a message of %s", id)
	return m
}

// tryNextFor is nextFor reporting a timeout (or a failed connection) as an
// error, for callers that say more when they fail.
func (c *wsClient) tryNextFor(id string, d time.Duration) (wsMsg, error) {
	if q := c.held[id]; len(q) > 0 {
		c.held[id] = q[1:]
		return q[0], nil
	}
	deadline := time.Now().Add(d)
	for {
		m, err := c.read(time.Until(deadline))
		if err != nil {
			return wsMsg{}, err
		}
		if m.ID == id {
			return m, nil
		}
		c.held[m.ID] = append(c.held[m.ID], m)
	}
}

// data waits for the next data message of id and decodes its data.
func (c *wsClient) data(id string, d time.Duration, dst any) {
	c.t.Helper()
	m := c.nextFor(id, d)
	require.Contains(c.t, []string{"next", "data"}, m.Type, "message %s %s", m.Type, m.Payload)
	var r gqlResponse
	require.NoError(c.t, json.Unmarshal(m.Payload, &r))
	require.Empty(c.t, r.Errors)
	require.NoError(c.t, json.Unmarshal(r.Data, dst))
}

// quiet asserts nothing but keep-alives arrives within d.
func (c *wsClient) quiet(d time.Duration) {
	c.t.Helper()
	for id, q := range c.held {
		require.Empty(c.t, q, "held messages of %s", id)
	}
	m, err := c.read(d)
	if err == nil {
		c.t.Fatalf("unexpected message %s %s %s", m.Type, m.ID, m.Payload)
	}
	require.ErrorIs(c.t, err, errQuiet)
}

// testKeepAlive pings every 50ms.
var testKeepAlive = api.Limits{KeepAlive: 50 * time.Millisecond}

// opResult decodes an operation's first message: a next (its response) or
// an error (its errors).
func opResult(t *testing.T, m wsMsg) gqlResponse {
	t.Helper()
	var r gqlResponse
	switch m.Type {
	case "next", "data":
		require.NoError(t, json.Unmarshal(m.Payload, &r), "%s", m.Payload)
	case "error":
		require.NoError(t, json.Unmarshal(m.Payload, &r.Errors), "%s", m.Payload)
	default:
		t.Fatalf("operation %s answered %s %s", m.ID, m.Type, m.Payload)
	}
	return r
}
