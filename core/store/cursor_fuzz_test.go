package store

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
)

// FuzzCursorDecoding: any string a client sends as a cursor decodes or is
// an *InvalidError on "after" — never a panic, never an instant Postgres
// would refuse — and every cursor a list returns decodes to the position
// it encodes.
func FuzzCursorDecoding(f *testing.F) {
	f.Add(encodeKeyset(time.Unix(1700000000, 123000).UTC(), uuid.MustParse("6ba7b810-9dad-11d1-80b4-00c04fd430c8")))
	f.Add(encodeIDCursor(42))
	f.Add("")
	f.Add("!!!!")
	f.Add("ZQAAAAAAAAAA")
	f.Fuzz(func(t *testing.T, s string) {
		for _, err := range []error{func() error { _, err := decodeKeyset(s); return err }(),
			func() error { _, err := decodeIDCursor(s); return err }()} {
			var inv *InvalidError
			if err != nil && (!errors.As(err, &inv) || inv.Field != "after") {
				t.Fatalf("cursor %q: want an InvalidError on after, got %v", s, err)
			}
		}
		if k, err := decodeKeyset(s); err == nil {
			if us := k.at.UnixMicro(); us < 0 || us > maxCursorMicros {
				t.Fatalf("keyset %q decoded to %s, an instant no row was stamped with", s, k.at)
			}
			if got := encodeKeyset(k.at, k.id); got != s {
				if k2, err := decodeKeyset(got); err != nil || !k2.at.Equal(k.at) || k2.id != k.id {
					t.Fatalf("keyset %q does not round-trip (%q)", s, got)
				}
			}
		}
		if id, err := decodeIDCursor(s); err == nil && id <= 0 {
			t.Fatalf("cursor %q decoded to a non-positive id %d", s, id)
		}
	})
}
