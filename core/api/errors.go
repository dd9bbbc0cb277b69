package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/converge-run/converge/core/store"
)

// The extensions.code values the API produces.
const (
	codeBadUserInput    = "BAD_USER_INPUT"
	codeNotFound        = "NOT_FOUND"
	codeConflict        = "CONFLICT"
	codeUnauthenticated = "UNAUTHENTICATED"
	codeForbidden       = "FORBIDDEN"
	codeInternal        = "INTERNAL"
	// codeUnavailable: the server is shutting down (a websocket refused
	// while it drains); the request may be made again.
	codeUnavailable = "UNAVAILABLE"
)

var (
	errUnauthenticated = errors.New("a valid bearer token is required (Authorization: Bearer <token>, or the connection_init payload's Authorization)")
	errForbidden       = errors.New("this token's role (viewer) may not run mutations")
	errPanic           = errors.New("panic")
	errNUL             = errors.New("the request holds a NUL character (U+0000), which no string may contain")
)

// limitError is a request over one of the Limits.
type limitError struct{ msg, limit string }

func (e *limitError) Error() string { return e.msg }

// presentError is the one error presenter: it classifies err by the core
// sentinels and never shows internal text. GraphQL's own parse and
// validation errors (and gqlgen's complexity limit) pass through with their
// codes.
func (h *Handler) presentError(ctx context.Context, err error) *gqlerror.Error {
	out := graphql.DefaultErrorPresenter(ctx, err)
	var gqlErr *gqlerror.Error
	if errors.As(err, &gqlErr) && gqlErr.Err == nil {
		return presentProtocolError(out, gqlErr)
	}
	ext := map[string]any{}
	var inv *store.InvalidError
	var lim *limitError
	var brk *store.BreakingChangeError
	switch {
	case errors.As(err, &brk):
		ext["code"], ext["rule"] = codeConflict, "breaking_change"
		ext["kind"], ext["version"], ext["resourceCount"] = brk.Kind, brk.Version, brk.Count
		ext["resources"], ext["fields"], ext["others"] = nonNil(brk.Resources), nonNil(brk.Fields), nonNil(brk.Others)
		out.Message = brk.Error()
	case errors.As(err, &inv):
		ext["code"] = codeBadUserInput
		field, pointer := splitField(inv.Field)
		if field != "" {
			ext["field"] = field
		}
		if pointer != "" {
			ext["pointer"] = pointer
		}
		ext["rule"] = inv.Rule
		out.Message = inv.Error()
	case errors.As(err, &lim):
		ext["code"], ext["limit"] = codeBadUserInput, lim.limit
		out.Message = lim.msg
	case errors.Is(err, context.DeadlineExceeded) && errors.Is(ctx.Err(), context.DeadlineExceeded):
		// The operation's own deadline (API_REQUEST_TIMEOUT) passed: a
		// refusal naming its limit, logged for the operator (a slow
		// database shows here first).
		ext["code"], ext["limit"] = codeBadUserInput, "timeout"
		out.Message = fmt.Sprintf("the operation ran longer than %s (API_REQUEST_TIMEOUT)", h.limits.RequestTimeout)
		if firstTimeout(ctx) { // once per operation, however many of its fields were cut
			h.log.Warn().Err(err).Str("request_id", RequestID(ctx)).Str("path", out.Path.String()).Msg("graphql request timed out")
		}
	case errors.Is(err, store.ErrNotFound):
		ext["code"] = codeNotFound
	case errors.Is(err, store.ErrConflict):
		ext["code"] = codeConflict
	case errors.Is(err, errUnauthenticated):
		ext["code"], out.Message = codeUnauthenticated, errUnauthenticated.Error()
	case errors.Is(err, errForbidden):
		ext["code"], out.Message = codeForbidden, errForbidden.Error()
	default:
		id := RequestID(ctx)
		ext["code"], ext["requestId"] = codeInternal, id
		out.Message = fmt.Sprintf("internal error, see server logs (request id %s)", id)
		switch {
		case errors.Is(err, context.Canceled):
			h.log.Debug().Err(err).Str("request_id", id).Msg("request cancelled")
		case errors.Is(err, errPanic):
			// logged with its stack by recoverPanic
		default:
			h.log.Error().Err(err).Str("request_id", id).Str("path", out.Path.String()).Msg("graphql request failed")
		}
	}
	out.Extensions = ext
	return out
}

// splitField splits an InvalidError field into the input's name and a JSON
// pointer into it: "spec/cidr" → ("spec", "/cidr"), "name" → ("name", "").
func splitField(f string) (string, string) {
	name, rest, ok := strings.Cut(f, "/")
	if !ok {
		return f, ""
	}
	return name, "/" + rest
}

// recoverPanic turns a resolver panic into an INTERNAL error, logged once
// with its stack.
func (h *Handler) recoverPanic(ctx context.Context, v any) error {
	h.log.Error().Str("request_id", RequestID(ctx)).Interface("panic", v).Bytes("stack", debug.Stack()).
		Msg("graphql resolver panicked")
	return fmt.Errorf("%w: %v", errPanic, v)
}

// writeHTTPError answers a request rejected before GraphQL execution with a
// GraphQL-shaped error body.
func writeHTTPError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="converge"`)
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]any{{
		"message":    msg,
		"extensions": map[string]any{"code": code, "requestId": RequestID(r.Context())},
	}}})
}

// writeLimitError is writeHTTPError for a request over one of the Limits:
// BAD_USER_INPUT with extensions.limit naming it.
func writeLimitError(w http.ResponseWriter, r *http.Request, status int, limit, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]any{{
		"message":    msg,
		"extensions": map[string]any{"code": codeBadUserInput, "limit": limit, "requestId": RequestID(r.Context())},
	}}})
}

// presentProtocolError codes GraphQL's own errors (parse, validation,
// transport decoding): parse and validation errors keep their codes, the
// parser's token limit and a body that is not a GraphQL request become
// BAD_USER_INPUT, and a request body is never echoed back.
func presentProtocolError(out, gqlErr *gqlerror.Error) *gqlerror.Error {
	switch {
	case strings.HasPrefix(gqlErr.Message, "exceeded token limit"):
		out.Message = gqlErr.Message + " (API_MAX_TOKENS)"
		out.Extensions = map[string]any{"code": codeBadUserInput, "limit": "tokens"}
	case strings.HasPrefix(gqlErr.Message, "json request body could not be decoded"):
		msg, _, _ := strings.Cut(gqlErr.Message, " body:")
		out.Message = msg
		out.Extensions = map[string]any{"code": codeBadUserInput}
	}
	if _, coded := out.Extensions["code"]; !coded {
		if out.Extensions == nil {
			out.Extensions = map[string]any{}
		}
		out.Extensions["code"] = codeBadUserInput
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
