package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// readBody reads a request body whole, up to the body limit and before
// deadline, so that an oversized one — announced or chunked — is refused
// with 413 naming the limit, one still arriving at the deadline with 408
// naming API_REQUEST_TIMEOUT, and a body carrying a NUL character (which no
// stored string may hold) is refused with BAD_USER_INPUT instead of failing
// in the database. It reports whether the request may go on.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, deadline time.Time) bool {
	tooLarge := func() bool {
		writeLimitError(w, r, http.StatusRequestEntityTooLarge, "body",
			fmt.Sprintf("request body is larger than %d bytes (API_MAX_BODY_BYTES)", h.limits.BodyBytes))
		return false
	}
	if r.ContentLength > h.limits.BodyBytes {
		return tooLarge()
	}
	if r.Method == http.MethodGet {
		q := r.URL.Query()
		if hasNUL([]byte(q.Get("query"))) || hasNUL([]byte(q.Get("variables"))) {
			writeHTTPError(w, r, http.StatusBadRequest, codeBadUserInput, errNUL.Error())
			return false
		}
	}
	if r.Body == nil || r.Body == http.NoBody {
		return true
	}
	b, err := h.readWithin(w, r, deadline)
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return tooLarge()
		case errors.Is(err, os.ErrDeadlineExceeded):
			writeLimitError(w, r, http.StatusRequestTimeout, "timeout",
				fmt.Sprintf("the request body did not arrive within %s (API_REQUEST_TIMEOUT)", h.limits.RequestTimeout))
			return false
		}
		writeHTTPError(w, r, http.StatusBadRequest, codeBadUserInput, "could not read the request body")
		return false
	}
	if int64(len(b)) > h.limits.BodyBytes {
		return tooLarge()
	}
	if hasNUL(b) {
		writeHTTPError(w, r, http.StatusBadRequest, codeBadUserInput, errNUL.Error())
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return true
}

// readWithin reads the body (one byte past the limit at most) under a read
// deadline on the connection. The deadline is set here, per request, rather
// than as the server's ReadTimeout: the same listener carries long-lived
// Connect streams. It is lifted once the whole body is in (else the
// server's watch for a client hang-up would fail at the deadline), and
// kept when the body was cut short: net/http then reads the rest away,
// which must not wait on a stalled client either.
func (h *Handler) readWithin(w http.ResponseWriter, r *http.Request, deadline time.Time) ([]byte, error) {
	rc := http.NewResponseController(w)
	bounded := rc.SetReadDeadline(deadline) == nil // a writer without deadlines (a test recorder) reads unbounded
	b, err := io.ReadAll(io.LimitReader(r.Body, h.limits.BodyBytes+1))
	if bounded && err == nil && int64(len(b)) <= h.limits.BodyBytes {
		_ = rc.SetReadDeadline(time.Time{})
	}
	return b, err
}
