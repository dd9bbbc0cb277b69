package store

import "github.com/converge-run/converge/core/store/internal/dbx"

// The sentinels every store error is classified by (errors.Is), shared with
// the store's sub-packages (pipeline, maintenance, membership, lifecycle),
// whose driver errors go through the same mapper. The GraphQL error
// presenter maps them to NOT_FOUND, CONFLICT and BAD_USER_INPUT.
var (
	// ErrNotFound: the named object does not exist.
	ErrNotFound = dbx.ErrNotFound
	// ErrConflict: the object exists in a state that forbids the change (a
	// duplicate, a second default, a resource being deleted, …).
	ErrConflict = dbx.ErrConflict
	// ErrInvalid: the input is malformed or breaks a rule; the error is an
	// *InvalidError naming the field.
	ErrInvalid = dbx.ErrInvalid
)

// InvalidError is input the store rejected. errors.Is(err, ErrInvalid).
// Field names the offending input (an input field, or a document name
// followed by a JSON pointer: "spec/cidr"); Rule is a stable machine-readable
// code (a JSON Schema keyword, a manifest lattice rule, or one of the
// store's own: "unknown_kind", "cursor_invalid", …).
type InvalidError = dbx.InvalidError

func invalid(field, rule, format string, args ...any) *InvalidError {
	return dbx.Invalid(field, rule, format, args...)
}

func notFound(format string, args ...any) error { return dbx.NotFound(format, args...) }

func conflict(format string, args ...any) error { return dbx.Conflict(format, args...) }

// mapErr classifies a driver error once, at the store boundary (see
// dbx.MapErr). what names the object the statement worked on.
func mapErr(err error, what string) error { return dbx.MapErr(err, what) }
