package dbx

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestMapErr_ClassifiesDriverErrors(t *testing.T) {
	t.Parallel()
	type want struct {
		Sentinel string
		Field    string
		Rule     string
		Message  string
	}
	classify := func(err error) want {
		var w want
		switch {
		case errors.Is(err, ErrNotFound):
			w.Sentinel = "not found"
		case errors.Is(err, ErrConflict):
			w.Sentinel = "conflict"
		case errors.Is(err, ErrInvalid):
			w.Sentinel = "invalid"
		default:
			w.Sentinel = "none"
		}
		var ie *InvalidError
		if errors.As(err, &ie) {
			w.Field, w.Rule = ie.Field, ie.Rule
		}
		w.Message = err.Error()
		return w
	}
	cases := map[string]struct {
		reason string
		err    error
		want   want
	}{
		"NoRows": {"no row is not found, naming the object",
			fmt.Errorf("scan: %w", pgx.ErrNoRows), want{"not found", "", "", "resource vpc/a not found"}},
		"Unique": {"a unique violation is a conflict naming the object",
			&pgconn.PgError{Code: "23505", ConstraintName: "resources_kind_name_key"},
			want{"conflict", "", "", "resource vpc/a already exists (resources_kind_name_key)"}},
		"ManifestCheck": {"the manifest CHECK's pointer and rule are parsed out",
			&pgconn.PgError{Code: "23514", ConstraintName: "kind_manifest_legal",
				Message: "manifest /reactions/0/emits: a composer (specChange emitting children) must also emit status or conditions [composer_requires_status]"},
			want{"invalid", "manifest/reactions/0/emits", "composer_requires_status",
				"manifest/reactions/0/emits: a composer (specChange emitting children) must also emit status or conditions [composer_requires_status]"}},
		"ManifestCheckRoot": {"an empty pointer names the document",
			&pgconn.PgError{Code: "23514", Message: "manifest : must be a JSON object [unknown_field]"},
			want{"invalid", "manifest", "unknown_field", "manifest: must be a JSON object [unknown_field]"}},
		"NameCheck": {"a CHECK on a column names the input field",
			&pgconn.PgError{Code: "23514", ConstraintName: "resources_name_check", Message: `new row violates check constraint "resources_name_check"`},
			want{"invalid", "name", "check_violation", `name: new row violates check constraint "resources_name_check" [check_violation]`}},
		"Serialization": {"a serialization failure is a retryable conflict",
			&pgconn.PgError{Code: "40001", Message: "could not serialize access"},
			want{"conflict", "", "", "resource vpc/a: concurrent change, retry: could not serialize access"}},
		"NUL": {"a NUL in a text parameter is invalid input, not an internal error",
			&pgconn.PgError{Code: "22021", Message: `invalid byte sequence for encoding "UTF8": 0x00`},
			want{"invalid", "", "invalid_value", `input: invalid byte sequence for encoding "UTF8": 0x00 [invalid_value]`}},
		"NoData": {"a function's no_data_found is not found",
			&pgconn.PgError{Code: "P0002", Message: "no resource"},
			want{"not found", "", "", "resource vpc/a not found: no resource"}},
		"Other": {"anything else is wrapped with context, unclassified",
			errors.New("connection reset"), want{"none", "", "", "resource vpc/a: connection reset"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, classify(MapErr(tc.err, "resource vpc/a"))); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
	require.NoError(t, MapErr(nil, "x"))
}

func TestWrap_FormatsTheStatement(t *testing.T) {
	t.Parallel()
	require.NoError(t, Wrap(nil, "drain (shards %d-%d)", 0, 15))
	err := Wrap(&pgconn.PgError{Code: "23505", ConstraintName: "k"}, "drain (shards %d-%d)", 0, 15)
	require.ErrorIs(t, err, ErrConflict)
	require.EqualError(t, err, "drain (shards 0-15) already exists (k)")
	base := errors.New("boom")
	require.ErrorIs(t, Wrap(base, "x %d", 1), base, "unclassified errors stay wrapped")
}
