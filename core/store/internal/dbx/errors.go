package dbx

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The sentinels every store error is classified by (errors.Is). Package
// store re-exports them; the GraphQL error presenter maps them to NOT_FOUND,
// CONFLICT and BAD_USER_INPUT.
var (
	// ErrNotFound: the named object does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the object exists in a state that forbids the change (a
	// duplicate, a second default, a resource being deleted, …).
	ErrConflict = errors.New("conflict")
	// ErrInvalid: the input is malformed or breaks a rule; the error is an
	// *InvalidError naming the field.
	ErrInvalid = errors.New("invalid input")
)

// InvalidError is input the store rejected. errors.Is(err, ErrInvalid).
type InvalidError struct {
	// Field names the offending input: an input field ("kind", "after",
	// "labels", "verb") or a path into a JSON document, the document's name
	// followed by a JSON pointer ("spec/cidr", "manifest/reactions/0/emits").
	Field string
	// Rule is a stable machine-readable code: a JSON Schema keyword for a
	// spec or config violation ("type", "required"), a manifest lattice rule
	// ("composer_requires_status"), or one of the store's own
	// ("unknown_kind", "cursor_invalid", "label_key_invalid", …).
	Rule    string
	Message string
}

// Error renders "<field>: <message> [<rule>]".
func (e *InvalidError) Error() string {
	field := e.Field
	if field == "" {
		field = "input"
	}
	return fmt.Sprintf("%s: %s [%s]", field, e.Message, e.Rule)
}

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Invalid returns an *InvalidError for field breaking rule.
func Invalid(field, rule, format string, args ...any) *InvalidError {
	return &InvalidError{Field: field, Rule: rule, Message: fmt.Sprintf(format, args...)}
}

// classified is a not-found or conflict error with a message naming the
// object.
type classified struct {
	msg  string
	kind error
}

func (e *classified) Error() string        { return e.msg }
func (e *classified) Is(target error) bool { return target == e.kind }

// NotFound returns an error that errors.Is ErrNotFound.
func NotFound(format string, args ...any) error {
	return &classified{msg: fmt.Sprintf(format, args...), kind: ErrNotFound}
}

// Conflict returns an error that errors.Is ErrConflict.
func Conflict(format string, args ...any) error {
	return &classified{msg: fmt.Sprintf(format, args...), kind: ErrConflict}
}

// Postgres error codes the store classifies.
const (
	codeUniqueViolation        = "23505"
	codeCheckViolation         = "23514"
	codeForeignKeyViolation    = "23503"
	codeNotNullViolation       = "23502"
	codeNoDataFound            = "P0002"
	codePrerequisiteState      = "55000"
	codeSerializationFailure   = "40001"
	codeDeadlockDetected       = "40P01"
	codeInvalidTextRepr        = "22P02"
	codeNumericOutOfRange      = "22003"
	codeInvalidParameterValue  = "22023"
	codeInvalidJSONText        = "22032"
	codeUntranslatableCharater = "22P05"
	// codeCharacterNotInRepertoire is a text parameter holding a NUL (or
	// another byte sequence the encoding cannot hold); the API refuses NULs
	// before they get here, this keeps any other road an input error.
	codeCharacterNotInRepertoire = "22021"
)

// manifestCheckRE parses validate_kind_manifest's message:
// "manifest <json-pointer>: <message> [<rule>]".
var manifestCheckRE = regexp.MustCompile(`^manifest (\S*): (.*) \[([a-z_]+)\]$`)

// checkFields names the input field behind each CHECK constraint.
var checkFields = map[string]string{
	"resources_name_check":                   "name",
	"resources_labels_check":                 "labels",
	"providerconfigs_name_check":             "name",
	"reactor_bindings_name_check":            "name",
	"reactor_bindings_check":                 "reactor",
	"reactor_bindings_transition_check":      "transition",
	"reactor_bindings_label_match_check":     "labelMatch",
	"kind_config_max_inflight_check":         "maxInflight",
	"kind_config_task_deadline_secs_check":   "taskDeadlineSecs",
	"kind_config_resync_interval_secs_check": "resyncIntervalSecs",
	"kind_config_orphan_grace_secs_check":    "orphanGraceSecs",
	"kind_manifest_check":                    "manifest/kind",
}

// MapErr classifies a driver error once, at the store boundary. what names
// the object the statement worked on ("resource vpc/a"); it prefixes errors
// that are not classified, which stay wrapped (errors.Is still sees
// context.Canceled, a package's own sentinels, …).
func MapErr(err error, what string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return NotFound("%s not found", what)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return fmt.Errorf("%s: %w", what, err)
	}
	switch pgErr.Code {
	case codeUniqueViolation:
		return Conflict("%s already exists (%s)", what, pgErr.ConstraintName)
	case codeCheckViolation:
		if m := manifestCheckRE.FindStringSubmatch(pgErr.Message); m != nil {
			return &InvalidError{Field: "manifest" + m[1], Rule: m[3], Message: m[2]}
		}
		field, ok := checkFields[pgErr.ConstraintName]
		if !ok {
			field = pgErr.ConstraintName
		}
		return &InvalidError{Field: field, Rule: "check_violation", Message: pgErr.Message}
	case codeForeignKeyViolation:
		return &InvalidError{Field: pgErr.ConstraintName, Rule: "reference", Message: pgErr.Message}
	case codeNotNullViolation:
		return &InvalidError{Field: pgErr.ColumnName, Rule: "required", Message: pgErr.Message}
	case codeInvalidTextRepr, codeNumericOutOfRange, codeInvalidParameterValue, codeInvalidJSONText,
		codeUntranslatableCharater, codeCharacterNotInRepertoire:
		return &InvalidError{Field: "", Rule: "invalid_value", Message: strings.TrimSpace(pgErr.Message)}
	case codeNoDataFound:
		return NotFound("%s not found: %s", what, pgErr.Message)
	case codePrerequisiteState:
		return Conflict("%s: %s", what, pgErr.Message)
	case codeSerializationFailure, codeDeadlockDetected:
		return Conflict("%s: concurrent change, retry: %s", what, pgErr.Message)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Wrap is MapErr with a formatted description of the statement, for the
// sub-packages whose errors name a pass or a batch rather than an object
// ("drain batch (shards 0-15)").
func Wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return MapErr(err, fmt.Sprintf(format, args...))
}

// IsConstraint reports whether err is a violation of the named constraint.
func IsConstraint(err error, name string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.ConstraintName == name
}
