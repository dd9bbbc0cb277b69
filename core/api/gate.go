package api

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"

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

// connState is one websocket connection's bookkeeping.
type connState struct {
	mu   sync.Mutex
	subs int
}

type connKey struct{}

// wsInit authenticates a websocket connection: the upgrade request's
// Authorization header, else the connection_init payload's Authorization
// (or authorization, or token). It also starts the connection's
// subscription count.
func (h *Handler) wsInit(ctx context.Context, p transport.InitPayload) (context.Context, *transport.InitPayload, error) {
	ctx = context.WithValue(ctx, connKey{}, &connState{})
	if h.open() {
		return ctx, nil, nil
	}
	if hasIdentity(ctx) {
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
	return auth.WithIdentity(ctx, id), nil, nil
}

// hasIdentity: the HTTP layer authenticated the upgrade with a header (an
// upgrade without one carries the zero Identity).
func hasIdentity(ctx context.Context) bool {
	return auth.FromContext(ctx).Role == auth.RoleAdmin || auth.FromContext(ctx).Role == auth.RoleViewer
}

// gate authorizes each operation: viewers may not mutate (over HTTP or
// websocket), and a websocket connection holds at most maxSubs live
// subscriptions.
type gate struct {
	maxSubs int
	present func(context.Context, error) *gqlerror.Error
}

var (
	_ graphql.HandlerExtension     = gate{}
	_ graphql.OperationInterceptor = gate{}
)

func (gate) ExtensionName() string                   { return "ConvergeGate" }
func (gate) Validate(graphql.ExecutableSchema) error { return nil }

func (g gate) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	oc := graphql.GetOperationContext(ctx)
	switch oc.Operation.Operation {
	case ast.Mutation:
		if !auth.FromContext(ctx).CanMutate() {
			return g.reject(ctx, errForbidden)
		}
	case ast.Subscription:
		cs, _ := ctx.Value(connKey{}).(*connState)
		if cs == nil {
			break
		}
		cs.mu.Lock()
		if cs.subs >= g.maxSubs {
			cs.mu.Unlock()
			return g.reject(ctx, &limitError{msg: fmt.Sprintf("at most %d subscriptions per connection", g.maxSubs),
				limit: "subscriptions"})
		}
		cs.subs++
		cs.mu.Unlock()
		context.AfterFunc(ctx, func() {
			cs.mu.Lock()
			cs.subs--
			cs.mu.Unlock()
		})
	}
	return next(ctx)
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
