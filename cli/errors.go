package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/Khan/genqlient/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"golang.org/x/term"
)

// APIError is a GraphQL error the server answered with.
type APIError struct {
	// Code is extensions.code (BAD_USER_INPUT, NOT_FOUND, CONFLICT,
	// UNAUTHENTICATED, FORBIDDEN, INTERNAL); empty when the server sent
	// none (e.g. a GraphQL validation error).
	Code    string
	Message string
	// Status is the HTTP status when the request was refused before
	// execution.
	Status int
	// More are the further errors of the same response.
	More []*APIError
}

func (e *APIError) Error() string {
	parts := []string{e.one()}
	for _, m := range e.More {
		parts = append(parts, m.one())
	}
	return strings.Join(parts, "; ")
}

func (e *APIError) one() string {
	code := e.Code
	if code == "" {
		code = "GRAPHQL_ERROR"
	}
	return code + ": " + e.Message
}

// apiError converts genqlient's error forms into *APIError (other errors
// pass through).
func apiError(err error) error {
	if err == nil {
		return nil
	}
	var list gqlerror.List
	var one *gqlerror.Error
	var he *graphql.HTTPError
	switch {
	case errors.As(err, &he):
		if len(he.Response.Errors) == 0 {
			return &APIError{Status: he.StatusCode, Message: fmt.Sprintf("HTTP %d", he.StatusCode)}
		}
		e := fromList(he.Response.Errors)
		e.Status = he.StatusCode
		return e
	case errors.As(err, &list) && len(list) > 0:
		return fromList(list)
	case errors.As(err, &one):
		return fromList(gqlerror.List{one})
	}
	return err
}

func fromList(list gqlerror.List) *APIError {
	var out *APIError
	for _, g := range list {
		e := &APIError{Message: g.Message}
		if c, ok := g.Extensions["code"].(string); ok {
			e.Code = c
		}
		if out == nil {
			out = e
		} else {
			out.More = append(out.More, e)
		}
	}
	return out
}

// FormatError is the one-line message conctl prints for err: the GraphQL
// code and message for a server error, a hint for an unreachable server.
func FormatError(err error) string {
	var ue *url.Error
	var oe *net.OpError
	if errors.As(err, &ue) && errors.As(err, &oe) && oe.Op == "dial" {
		return fmt.Sprintf("%v (is converge running there? set --server or CONVERGE_SERVER)", err)
	}
	return err.Error()
}

// ErrorCode is the GraphQL extensions.code err carries, if any.
func ErrorCode(err error) string {
	var e *APIError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// isNotFound reports whether the server answered NOT_FOUND.
func isNotFound(err error) bool { return ErrorCode(apiError(err)) == "NOT_FOUND" }
