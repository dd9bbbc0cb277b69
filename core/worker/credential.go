package worker

import (
	"context"
	"fmt"
	"os"
	"strings"

	"connectrpc.com/connect"
)

// credential presents the worker's bearer token on every call to the
// broker: Options.Token, else the first line of Options.TokenFile, re-read
// on every call so a rotated file applies at the next reconnect.
type credential struct {
	token string
	file  string
}

func (c credential) value() (string, error) {
	if c.token != "" || c.file == "" {
		return c.token, nil
	}
	b, err := os.ReadFile(c.file)
	if err != nil {
		return "", fmt.Errorf("read WORKER_TOKEN_FILE: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if t := strings.TrimSpace(line); t != "" {
		return t, nil
	}
	return "", fmt.Errorf("WORKER_TOKEN_FILE %s: its first line is empty", c.file)
}

func (c credential) set(h interface{ Set(k, v string) }) error {
	t, err := c.value()
	if err != nil {
		return err
	}
	if t != "" {
		h.Set("Authorization", "Bearer "+t)
	}
	return nil
}

func (c credential) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := c.set(req.Header()); err != nil {
			return nil, connect.NewError(connect.CodeUnauthenticated, err)
		}
		return next(ctx, req)
	}
}

func (c credential) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		_ = c.set(conn.RequestHeader()) // an unreadable file: sessions reads it first and retries with why
		return conn
	}
}

func (c credential) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
