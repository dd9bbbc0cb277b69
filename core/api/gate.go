package api

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/formatter"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/converge-run/converge/core/auth"
)

// Websocket close codes of graphql-transport-ws for a rejected init.
const (
	closeUnauthorized = 4401
)

// connState is one websocket connection's bookkeeping: its live
// subscriptions and its running queries and mutations.
type connState struct {
	mu   sync.Mutex
	subs int
	ops  int
}

// take counts one more in *n unless it is at max already.
func (cs *connState) take(n *int, limit int) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if *n >= limit {
		return false
	}
	*n++
	return true
}

func (cs *connState) give(n *int) {
	cs.mu.Lock()
	*n--
	cs.mu.Unlock()
}

type connKey struct{}

// wsInit authenticates a websocket connection: the upgrade request's
// Authorization header, else the connection_init payload's Authorization
// (or authorization, or token). It also starts the connection's
// subscription count.
func (h *Handler) wsInit(ctx context.Context, p transport.InitPayload) (context.Context, *transport.InitPayload, error) {
	ctx = context.WithValue(ctx, connKey{}, &connState{})
	if sess, _ := ctx.Value(wsSessionKey{}).(*wsSession); sess != nil && sess.tls != nil &&
		len(sess.tls.PeerCertificates) > 0 && h.clientCerts != nil {
		go h.closeWhenCertificateInvalid(ctx, sess)
	}
	if h.open() {
		return ctx, nil, nil
	}
	if hasIdentity(ctx) {
		go h.closeWhenRevoked(ctx, auth.FromContext(ctx))
		return ctx, nil, nil
	}
	token := auth.Bearer(p.Authorization())
	if token == "" {
		token = p.GetString("token")
	}
	id, ok := h.tokens.Lookup(token)
	if !ok {
		return transport.WithWebsocketCloseCode(ctx, closeUnauthorized), nil, errUnauthenticated
	}
	go h.closeWhenRevoked(ctx, id)
	return auth.WithIdentity(ctx, id), nil, nil
}

// closeWhenRevoked closes a websocket connection (4401) once the token it
// authenticated with is removed from API_TOKENS_FILE: its subscriptions end
// with it. It returns when the connection ends (ctx) or at once for an
// identity without a token.
func (h *Handler) closeWhenRevoked(ctx context.Context, id auth.Identity) {
	sess, _ := ctx.Value(wsSessionKey{}).(*wsSession)
	if h.tokens == nil || sess == nil {
		return
	}
	for {
		changed := h.tokens.Changed()
		if _, ok := h.tokens.Current(id); !ok {
			sess.closeUnauthorized("the connection's API token was revoked")
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// closeWhenCertificateInvalid closes a websocket connection (4401) once the
// client certificate of its handshake no longer verifies: its CA rotated out
// of TLS_CLIENT_CA_FILE, or it expired. The listener checks every request
// again (tlsreload's ClientCheck), but a connection upgraded before is one
// request that lasts (ClientCheck.Watch). It returns when the connection
// ends (ctx).
func (h *Handler) closeWhenCertificateInvalid(ctx context.Context, sess *wsSession) {
	if err := h.clientCerts.Watch(ctx, sess.tls); err != nil {
		h.log.Warn().Err(err).Str("request_id", RequestID(ctx)).Msg("websocket closed: its client certificate no longer verifies")
		sess.closeUnauthorized("the connection's client certificate no longer verifies")
	}
}

// hasIdentity: the HTTP layer authenticated the upgrade with a header (an
// upgrade without one carries the zero Identity).
func hasIdentity(ctx context.Context) bool {
	return auth.FromContext(ctx).Role == auth.RoleAdmin || auth.FromContext(ctx).Role == auth.RoleViewer
}

// gate authorizes each operation: a token revoked since the connection
// authenticated runs nothing, and one whose role changed runs as its new
// role; viewers may not mutate (over HTTP or websocket); a websocket
// connection holds at most maxSubs live subscriptions and runs at most
// maxOps queries and mutations at once, each within timeout (over HTTP,
// serveGraphQL bounds the request).
type gate struct {
	maxSubs int
	maxOps  int
	timeout time.Duration
	// tokens are the API's tokens (nil: none): an operation runs as its
	// token allows now, and not at all once the token was revoked.
	tokens  *auth.Tokens
	present func(context.Context, error) *gqlerror.Error
}

var (
	_ graphql.HandlerExtension     = gate{}
	_ graphql.OperationInterceptor = gate{}
)

func (gate) ExtensionName() string                   { return "ConvergeGate" }
func (gate) Validate(graphql.ExecutableSchema) error { return nil }

func (g gate) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	ctx = context.WithValue(ctx, timeoutsKey{}, &atomic.Bool{})
	return oneTimeout(g.intercept(ctx, next))
}

func (g gate) intercept(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	op := graphql.GetOperationContext(ctx).Operation.Operation
	id, ok := g.tokens.Current(auth.FromContext(ctx))
	if !ok {
		return g.reject(ctx, errUnauthenticated)
	}
	ctx = auth.WithIdentity(ctx, id)
	if op == ast.Mutation && !id.CanMutate() {
		return g.reject(ctx, errForbidden)
	}
	cs, _ := ctx.Value(connKey{}).(*connState)
	if cs == nil { // HTTP
		return next(ctx)
	}
	if op == ast.Subscription {
		if !cs.take(&cs.subs, g.maxSubs) {
			return g.reject(ctx, &limitError{limit: "subscriptions",
				msg: fmt.Sprintf("at most %d subscriptions per connection (API_WS_MAX_SUBSCRIPTIONS)", g.maxSubs)})
		}
		return untilDone(ctx, next(ctx), func() { cs.give(&cs.subs) })
	}
	if !cs.take(&cs.ops, g.maxOps) {
		return g.reject(ctx, &limitError{limit: "operations",
			msg: fmt.Sprintf("at most %d queries and mutations at once per connection (API_WS_MAX_OPERATIONS)", g.maxOps)})
	}
	opCtx, cancel := context.WithTimeout(ctx, g.timeout)
	return untilDone(ctx, next(opCtx), func() {
		cancel()
		cs.give(&cs.ops)
	})
}

// timeoutsKey holds an operation's *atomic.Bool: set once one of its errors
// was presented as its timeout.
type timeoutsKey struct{}

// firstTimeout reports whether this is the first error of the operation
// presented as its timeout (API_REQUEST_TIMEOUT): every field still
// resolving at the deadline fails with it, and it is logged once.
func firstTimeout(ctx context.Context) bool {
	seen, _ := ctx.Value(timeoutsKey{}).(*atomic.Bool)
	return seen == nil || !seen.Swap(true)
}

// oneTimeout keeps the first of a response's timeout errors: the operation
// ran out of time once, however many of its fields the deadline cut.
func oneTimeout(rh graphql.ResponseHandler) graphql.ResponseHandler {
	return func(ctx context.Context) *graphql.Response {
		resp := rh(ctx)
		if resp == nil || len(resp.Errors) < 2 {
			return resp
		}
		kept, timedOut := resp.Errors[:0:0], false
		for _, e := range resp.Errors {
			if e.Extensions["limit"] == "timeout" {
				if timedOut {
					continue
				}
				timedOut = true
			}
			kept = append(kept, e)
		}
		resp.Errors = kept
		return resp
	}
}

// untilDone calls done once the operation is over: when its last response
// was taken (before gqlgen writes its complete, so a client that waits for
// that may start the next operation at once) or when its context ends (the
// client stopped it, the connection closed, or it panicked).
func untilDone(ctx context.Context, rh graphql.ResponseHandler, done func()) graphql.ResponseHandler {
	var once sync.Once
	stop := context.AfterFunc(ctx, func() { once.Do(done) })
	return func(ctx context.Context) *graphql.Response {
		resp := rh(ctx)
		if resp == nil {
			stop()
			once.Do(done)
		}
		return resp
	}
}

// reject answers an operation with a single presented error (a response
// built here does not pass through the server's presenter by itself).
func (g gate) reject(ctx context.Context, err error) graphql.ResponseHandler {
	return graphql.OneShot(&graphql.Response{Errors: gqlerror.List{g.present(ctx, err)}})
}

// selectionDepth is an operation's nesting. Without introspection its
// introspection fields are not counted (GraphiQL's introspection query is
// deep by design, and is bounded by a higher limit counted with them).
func selectionDepth(set ast.SelectionSet, seen int, introspection bool) int {
	if seen > 128 { // fragment cycles are rejected by validation; be safe anyway
		return seen
	}
	deepest := 0
	for _, s := range set {
		var d int
		switch s := s.(type) {
		case *ast.Field:
			if !introspection && strings.HasPrefix(s.Name, "__") {
				continue
			}
			d = 1 + selectionDepth(s.SelectionSet, seen+1, introspection)
		case *ast.InlineFragment:
			d = selectionDepth(s.SelectionSet, seen, introspection)
		case *ast.FragmentSpread:
			if s.Definition != nil {
				d = selectionDepth(s.Definition.SelectionSet, seen+1, introspection)
			}
		}
		deepest = max(deepest, d)
	}
	return deepest
}

// schemaSDL renders the served schema (without the built-in types).
func schemaSDL(s *ast.Schema) []byte {
	var b bytes.Buffer
	formatter.NewFormatter(&b, formatter.WithIndent("  ")).FormatSchema(s)
	return b.Bytes()
}
