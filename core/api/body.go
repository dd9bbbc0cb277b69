package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// readBody reads a request body whole, up to the body limit, so that an
// oversized one — announced or chunked — is refused with 413 naming the
// limit, and a body carrying a NUL character (which no stored string may
// hold) is refused with BAD_USER_INPUT instead of failing in the database.
// It reports whether the request may go on.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) bool {
	tooLarge := func() bool {
		writeHTTPError(w, r, http.StatusRequestEntityTooLarge, codeBadUserInput,
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
	b, err := io.ReadAll(io.LimitReader(r.Body, h.limits.BodyBytes+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge()
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
