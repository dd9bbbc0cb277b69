package store

import (
	"encoding/base64"
	"encoding/binary"
	"time"

	"github.com/google/uuid"
)

// Cursors are opaque to clients: base64url (no padding) of a tag byte and the
// keyset position. A cursor that does not decode is an *InvalidError on
// field "after".
const (
	cursorKeyset byte = 'k' // created_at (unix µs) + id: resources, provider configs
	cursorID     byte = 'e' // a bigint id: events
)

const (
	defaultPageSize = 50
	maxPageSize     = 500
)

// pageLimit applies the page-size rules: 0 → 50, more than 500 → 500.
func pageLimit(n int) (int, error) {
	switch {
	case n < 0:
		return 0, invalid("first", "limit_invalid", "page size must be positive, got %d", n)
	case n == 0:
		return defaultPageSize, nil
	case n > maxPageSize:
		return maxPageSize, nil
	}
	return n, nil
}

// keyset is a position in a (created_at DESC, id DESC) order.
type keyset struct {
	at time.Time
	id uuid.UUID
}

func encodeKeyset(at time.Time, id uuid.UUID) string {
	b := make([]byte, 1+8+16)
	b[0] = cursorKeyset
	binary.BigEndian.PutUint64(b[1:9], uint64(at.UnixMicro()))
	copy(b[9:], id[:])
	return base64.RawURLEncoding.EncodeToString(b)
}

// maxCursorMicros bounds a keyset cursor's instant: the end of year 9999
// (unix µs). A cursor is made from a row's created_at, which the database
// stamps; one before the epoch or past this was not, and Postgres would
// refuse the instant (timestamptz ends in 294276 AD, and starts in 4713 BC)
// as an error of its own rather than the client's.
const maxCursorMicros = 253402300799999999

func decodeKeyset(s string) (keyset, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 1+8+16 || b[0] != cursorKeyset {
		return keyset{}, badCursor()
	}
	us := int64(binary.BigEndian.Uint64(b[1:9]))
	if us < 0 || us > maxCursorMicros {
		return keyset{}, badCursor()
	}
	var k keyset
	k.at = time.UnixMicro(us).UTC()
	copy(k.id[:], b[9:])
	return k, nil
}

func encodeIDCursor(id int64) string {
	b := make([]byte, 1+8)
	b[0] = cursorID
	binary.BigEndian.PutUint64(b[1:], uint64(id))
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeIDCursor(s string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 1+8 || b[0] != cursorID {
		return 0, badCursor()
	}
	id := int64(binary.BigEndian.Uint64(b[1:]))
	if id <= 0 {
		return 0, badCursor()
	}
	return id, nil
}

func badCursor() error {
	return invalid("after", "cursor_invalid", "not a cursor this list returned (pass nextCursor unchanged)")
}

// CursorAt is the page cursor that continues after the row (createdAt, id)
// in the (created_at DESC, id DESC) order, as a page's NextCursor would be.
func CursorAt(createdAt time.Time, id uuid.UUID) string { return encodeKeyset(createdAt, id) }
