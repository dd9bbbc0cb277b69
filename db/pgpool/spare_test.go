package pgpool

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

func TestSpare_Room(t *testing.T) {
	t.Parallel()
	var s spare
	same := func(a, b []byte) bool { return unsafe.SliceData(a) == unsafe.SliceData(b) }

	// The first statement: pgx's buffer is copied into a new spare.
	pgxs := append(make([]byte, 0, 8), "head"...)
	got := s.room(pgxs, 4096)
	require.Equal(t, "head", string(got))
	require.GreaterOrEqual(t, cap(got)-len(got), 4096)
	require.True(t, same(got, s.buf), "lent in the spare's array")

	// pgx dropped it and passes a fresh buffer: the same array is lent again.
	again := s.room(append(make([]byte, 0, 1024), "next"...), 2048)
	require.Equal(t, "next", string(again))
	require.True(t, same(again, got), "no allocation")

	// pgx kept the spare (a small statement): it is grown in place, and
	// its bytes stay where they are.
	again = append(again[:0], "kept"...)
	grown := s.room(again, 64<<10)
	require.Equal(t, "kept", string(grown))
	require.True(t, same(grown, s.buf), "the grown array is the spare")
	require.GreaterOrEqual(t, cap(grown)-len(grown), 64<<10)

	// A statement past maxSpare gets a buffer of its own; the spare stays.
	before := s.buf
	huge := s.room(append(make([]byte, 0, 16), "big"...), maxSpare+1)
	require.Equal(t, "big", string(huge))
	require.False(t, same(huge, before))
	require.True(t, same(s.buf, before), "the spare is kept, not the huge buffer")
}
