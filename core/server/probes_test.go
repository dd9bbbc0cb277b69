package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// /readyz answers every caller, credentials or not, so a database error's
// text (the driver names the database host, user and database) is not
// served; the process's own reasons are.
func TestProbes_ReadyzServesNoDriverErrorText(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		err        error
		want, leak string
	}{
		"a driver's error": {err: fmt.Errorf("ping: %w", errors.New("failed to connect to `user=app-secret-user database=prod`: 10.9.8.7:5432 (db.internal): dial error")),
			want: "not ready: the primary database does not answer", leak: "10.9.8.7"},
		"the process's own reason": {err: fmt.Errorf("ready: %w", NotReadyError("liveness lock not held")),
			want: "not ready: liveness lock not held"},
	} {
		mux := http.NewServeMux()
		Probes(mux, func(context.Context) error { return tc.err })
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		b, _ := io.ReadAll(rec.Body)
		if rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s: status %d", name, rec.Code)
		}
		if !strings.Contains(string(b), tc.want) {
			t.Fatalf("%s: body %q, want %q", name, b, tc.want)
		}
		if tc.leak != "" && (strings.Contains(string(b), tc.leak) || strings.Contains(string(b), "app-secret-user")) {
			t.Fatalf("%s: /readyz serves the driver's error: %q", name, b)
		}
	}
}
