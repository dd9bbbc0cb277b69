// Package api is the GraphQL endpoint: gqlgen's server over the schema in
// graph/ and the resolvers in resolvers/, with
//
//   - transports: POST (application/json), GET (queries only) and websocket
//     (graphql-transport-ws and the legacy graphql-ws) on /graphql;
//   - the schema's SDL on /graphql/schema.graphql;
//   - limits: query complexity and depth, request body size, websocket
//     message size, subscriptions and running operations per connection, a
//     per-request timeout (on HTTP and websocket queries and mutations);
//   - optional bearer-token auth (core/auth), checked on HTTP and on the
//     websocket connection_init payload; viewers may not mutate;
//   - one error presenter mapping core errors to extensions.code
//     (BAD_USER_INPUT, NOT_FOUND, CONFLICT, UNAUTHENTICATED, FORBIDDEN,
//     INTERNAL) that never leaks internal text.
//
// The handler executes a schema it is handed: core never imports the
// generated executor (graph/) or the resolvers. resolvers.Mount is the
// wiring cmd/converge serves (and tests reuse), with the process's one
// notify.Listener, store and pools:
//
//	hub := live.NewHub(p.Listener, p.Read, log, live.WithPrimary(p.Primary)) // re-reads from the replica
//	p.AddDuty(hub)                                    // a core/engine Duty (Name, Run)
//	tokens, err := auth.LoadTokens(cfg.APITokensFile, cfg.TLSReload, log, workerFiles...) // API_TOKENS_FILE; nil = open API (warned at startup); run it as a duty to re-read the file
//	limits, err := api.LimitsFromEnv(os.Getenv)       // API_MAX_COMPLEXITY, API_WS_KEEPALIVE, …
//	schema := resolvers.NewSchema(resolvers.Deps{Store: p.Store, Hub: hub, …})
//	h := api.NewHandler(api.Deps{Schema: schema, Log: log, Tokens: tokens, Limits: limits, UI: dashboard})
//	mux.Handle("/graphql", h)
//	mux.Handle("/graphql/", h) // /graphql/schema.graphql
//	mux.Handle("/", h)         // only with a UI: the dashboard and /graphiql
package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"mime"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/auth"
	"github.com/converge-run/converge/core/tlsreload"
)

// Schema is what the handler executes: gqlgen's executable schema (with its
// complexity weights set) and the handler extensions its resolvers need,
// such as per-response dataloaders. resolvers.NewSchema builds the served
// one.
type Schema struct {
	Executable graphql.ExecutableSchema
	Extensions []graphql.HandlerExtension
}

// Deps are what the handler serves.
type Deps struct {
	// Schema is the executable schema and its extensions.
	Schema Schema
	// Log receives the handler's own logs (startup warning, internal errors).
	Log zerolog.Logger
	// Tokens enables bearer-token auth; nil runs the API open unless
	// Certificates lists identities.
	Tokens *auth.Tokens
	// Certificates admits client certificates (mutual TLS) whose identity
	// API_CLIENT_IDENTITIES lists, with its role; a bearer token, when
	// sent, still decides. Any other certificate — a worker's, a peer
	// broker's — is no API credential.
	Certificates auth.APIIdentities
	// ClientCerts verify a websocket connection's client certificate again
	// when the client CA bundle changes or it expires; the connection is
	// closed (4401) once it no longer verifies (nil: no mutual TLS).
	ClientCerts *tlsreload.ClientCheck
	// Limits bound every request; zero fields take their defaults.
	Limits Limits
	// UI, when set, serves every path the API does not (the dashboard and
	// the GraphiQL page built by the frontend).
	UI http.Handler
}

// Handler serves the GraphQL API.
type Handler struct {
	gql    http.Handler
	sdl    []byte
	ui     http.Handler
	limits Limits
	tokens *auth.Tokens
	certs  auth.APIIdentities
	// clientCerts verify a live websocket's certificate (nil: no mTLS).
	clientCerts *tlsreload.ClientCheck
	log         zerolog.Logger
	cors        []string

	// sessions are the open websockets; draining is set by Drain, after
	// which no new one opens.
	sessMu   sync.Mutex
	sessions map[*wsSession]struct{}
	draining bool
}

// NewHandler builds the API handler.
func NewHandler(d Deps) *Handler {
	lim := d.Limits.withDefaults()
	log := d.Log.With().Str("component", "api").Logger()
	if d.Tokens == nil && !d.Certificates.Set() {
		// At every log level: LOG_LEVEL=error must not hide an open API.
		log.Log().Str("level", "warn").Msg("API_TOKENS_FILE is not set: the GraphQL API is open to anyone who can reach it (every request may mutate)")
	}
	es := d.Schema.Executable

	h := &Handler{ui: d.UI, limits: lim, tokens: d.Tokens, certs: d.Certificates, clientCerts: d.ClientCerts, log: log,
		cors: lim.AllowedOrigins, sessions: map[*wsSession]struct{}{}}
	srv := handler.New(es)
	srv.AddTransport(transport.Websocket{
		Implementation: wsImpl{
			accept: websocket.AcceptOptions{
				OriginPatterns:     lim.AllowedOrigins,
				CompressionMode:    websocket.CompressionDisabled,
				InsecureSkipVerify: false,
			},
			keepAlive:  lim.KeepAlive,
			unfinished: lim.SubscriptionsPerConn + lim.OperationsPerConn,
		},
		InitFunc:              h.wsInit,
		InitTimeout:           lim.InitTimeout,
		KeepAlivePingInterval: lim.KeepAlive, // graphql-ws "ka" messages
		PayloadReadLimit:      &lim.WSPayloadBytes,
		ErrorFunc: func(ctx context.Context, err error) {
			log.Debug().Err(err).Str("request_id", RequestID(ctx)).Msg("websocket")
		},
	})
	srv.AddTransport(transport.GET{})
	srv.AddTransport(transport.POST{})
	cache := newQueryCache(lim.QueryCacheBytes)
	srv.SetQueryCache(cache)
	srv.SetParserTokenLimit(lim.Tokens)
	srv.Use(extension.Introspection{})
	srv.Use(&opLimits{complexity: lim.Complexity, depth: lim.Depth, aliases: lim.Aliases, introCost: lim.IntrospectionCost, cache: cache})
	srv.Use(gate{maxSubs: lim.SubscriptionsPerConn, maxOps: lim.OperationsPerConn, timeout: lim.RequestTimeout,
		tokens: d.Tokens, present: h.presentError})
	for _, ext := range d.Schema.Extensions {
		srv.Use(ext)
	}
	srv.SetErrorPresenter(h.presentError)
	srv.SetRecoverFunc(h.recoverPanic)
	h.gql = srv
	h.sdl = schemaSDL(es.Schema())
	return h
}

// ServeHTTP routes /graphql, /graphql/schema.graphql and (with a UI) the
// rest.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := withRequestID(r.Context(), r.Header.Get("X-Request-Id"))
	w.Header().Set("X-Request-Id", RequestID(ctx))
	r = r.WithContext(ctx)
	switch strings.TrimSuffix(r.URL.Path, "/") {
	case "/graphql":
		h.serveGraphQL(w, r)
	case "/graphql/schema.graphql":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(h.sdl)
	default:
		if h.ui == nil {
			http.NotFound(w, r)
			return
		}
		h.ui.ServeHTTP(w, r)
	}
}

func (h *Handler) serveGraphQL(w http.ResponseWriter, r *http.Request) {
	if h.corsPreflight(w, r) {
		return
	}
	upgrade := r.Header.Get("Upgrade") != ""
	id, err := h.authenticate(r, upgrade)
	if err != nil {
		writeHTTPError(w, r, http.StatusUnauthorized, codeUnauthenticated, err.Error())
		return
	}
	ctx := withParking(auth.WithIdentity(r.Context(), id))
	if upgrade {
		var session *wsSession
		ctx, session = withWSSession(ctx)
		session.tls = r.TLS
		if !h.track(session) {
			w.Header().Set("Retry-After", "1")
			writeHTTPError(w, r, http.StatusServiceUnavailable, codeUnavailable,
				"the server is shutting down: connect again (a ready replica, or this server once it has restarted)")
			return
		}
		defer h.untrack(session)
		defer session.end()
		h.gql.ServeHTTP(w, r.WithContext(ctx))
		return
	}
	if !transportAllowed(w, r) {
		return
	}
	if r.Method == http.MethodGet {
		w = &queryOnlyGET{ResponseWriter: w, r: r}
	}
	// One deadline for the whole request, its body's arrival included: a
	// client that stalls mid-body is answered, not held.
	deadline := time.Now().Add(h.limits.RequestTimeout)
	if !h.readBody(w, r, deadline) {
		return
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	h.gql.ServeHTTP(w, r.WithContext(ctx))
}

// Drain closes every open websocket with 1001 (going away) and refuses
// new ones with 503 and Retry-After: the process is shutting down, and its
// subscription hub stops with its duties, so a connection kept open would
// stay silent until the process exits, its client none the wiser. Closed,
// the client connects again — through a load balancer to a ready replica
// (/readyz answers 503 from the same moment), or to this server once it has
// restarted. Plain queries and mutations are still served until the
// listener closes.
func (h *Handler) Drain() {
	h.sessMu.Lock()
	h.draining = true
	open := make([]*wsSession, 0, len(h.sessions))
	for s := range h.sessions {
		open = append(open, s)
	}
	h.sessMu.Unlock()
	for _, s := range open {
		s.closeWith(int(websocket.StatusGoingAway), "the server is shutting down: connect again")
	}
	if len(open) > 0 {
		h.log.Info().Int("websockets", len(open)).Msg("websockets closed (going away): the server is shutting down")
	}
}

// track records an opening websocket, or reports false once Drain began.
func (h *Handler) track(s *wsSession) bool {
	h.sessMu.Lock()
	defer h.sessMu.Unlock()
	if h.draining {
		return false
	}
	h.sessions[s] = struct{}{}
	return true
}

func (h *Handler) untrack(s *wsSession) {
	h.sessMu.Lock()
	delete(h.sessions, s)
	h.sessMu.Unlock()
}

// open reports whether the API runs without credentials.
func (h *Handler) open() bool { return h.tokens == nil && !h.certs.Set() }

// authenticate resolves a request's credential: its Authorization header,
// else a listed client certificate. With credentials configured a missing
// one is an error except on a websocket upgrade (browsers cannot set
// headers there: the token comes in connection_init); an invalid token is
// always an error, whatever certificate came with it.
func (h *Handler) authenticate(r *http.Request, upgrade bool) (auth.Identity, error) {
	if h.open() {
		return auth.Identity{Role: auth.RoleAdmin}, nil
	}
	if token := auth.Bearer(r.Header.Get("Authorization")); token != "" {
		id, ok := h.tokens.Lookup(token)
		if !ok {
			return auth.Identity{}, errUnauthenticated
		}
		return id, nil
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		if id, ok := h.certs.Lookup(r.TLS.VerifiedChains[0][0]); ok {
			return id, nil
		}
	}
	if upgrade {
		return auth.Identity{}, nil
	}
	return auth.Identity{}, errUnauthenticated
}

// corsPreflight answers CORS for the allowed origins; it reports whether
// the request was a preflight (already answered).
func (h *Handler) corsPreflight(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || !originAllowed(h.cors, origin) {
		return false
	}
	w.Header().Set("Access-Control-Allow-Origin", origin)
	w.Header().Add("Vary", "Origin")
	if r.Method != http.MethodOptions {
		return false
	}
	w.Header().Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
	w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Request-Id")
	w.Header().Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return true
}

// originAllowed matches an Origin's host against the patterns (path.Match
// syntax, as coder/websocket's OriginPatterns).
func originAllowed(patterns []string, origin string) bool {
	host := origin
	if i := strings.Index(host, "://"); i >= 0 {
		host = host[i+3:]
	}
	for _, p := range patterns {
		if ok, _ := pathMatch(strings.ToLower(p), strings.ToLower(host)); ok {
			return true
		}
	}
	return false
}

type requestIDKey struct{}

var requestIDRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func withRequestID(ctx context.Context, incoming string) context.Context {
	id := incoming
	if !requestIDRE.MatchString(id) {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		id = hex.EncodeToString(b)
	}
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID is the request's id (X-Request-Id, echoed or generated); it is
// in every INTERNAL error and in the log line that explains it.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// transportAllowed refuses, with a coded error, a request no HTTP transport
// takes (gqlgen's own answer, "transport not supported", has no code):
// a method other than GET and POST is 405, a POST whose body is not JSON
// 415.
func transportAllowed(w http.ResponseWriter, r *http.Request) bool {
	switch r.Method {
	case http.MethodGet:
		return true
	case http.MethodPost:
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil && mt == "application/json" {
			return true
		}
		writeHTTPError(w, r, http.StatusUnsupportedMediaType, codeBadUserInput,
			fmt.Sprintf("a POST request's Content-Type must be application/json, not %q", r.Header.Get("Content-Type")))
		return false
	}
	w.Header().Set("Allow", "GET, POST")
	writeHTTPError(w, r, http.StatusMethodNotAllowed, codeBadUserInput,
		fmt.Sprintf("method %s is not allowed: send GraphQL requests with POST (or queries with GET)", r.Method))
	return false
}

// queryOnlyGET codes gqlgen's refusal of a mutation or subscription sent
// with GET (a 406 with an uncoded error): 405 with Allow: POST and a
// BAD_USER_INPUT error, so a cross-site GET can never change state and the
// client is told why.
type queryOnlyGET struct {
	http.ResponseWriter
	r       *http.Request
	refused bool
}

func (g *queryOnlyGET) WriteHeader(code int) {
	if code != http.StatusNotAcceptable {
		g.ResponseWriter.WriteHeader(code)
		return
	}
	g.refused = true
	g.Header().Set("Allow", "POST")
	writeHTTPError(g.ResponseWriter, g.r, http.StatusMethodNotAllowed, codeBadUserInput,
		"a GET request runs queries only: send mutations and subscriptions with POST")
}

func (g *queryOnlyGET) Write(b []byte) (int, error) {
	if g.refused {
		return len(b), nil // gqlgen's uncoded error, already answered
	}
	return g.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (g *queryOnlyGET) Unwrap() http.ResponseWriter { return g.ResponseWriter }
