package pgpool

import (
	"slices"
	"unsafe"
)

// spare is a buffer a connection keeps from one statement to the next for
// one of pgx's two statement buffers. pgx drops its write buffer past 1 KB
// after each flush and its argument buffer past 256 bytes before each
// statement, so every larger statement (an outbox batch, a compose's
// children, a claim's keys: tens of KB) allocated both afresh, each the
// size of its message: a sixth of converge's allocated bytes in a 200k run
// (126.5 of 723.1 MB over 20 s), after bindRoom and Reserve had cut each to
// one growth. Where pgx asks for room (room.Encode, reservePlan.Encode),
// the spare lends its array instead.
//
// It is safe because pgx holds one buffer of each kind per connection, and
// only until it replaces it: when the buffer pgx passes is not the spare's
// array, pgx has dropped the spare (it replaced it with a fresh one), and
// nothing else holds it — the write went out synchronously, and the
// arguments were copied into the write buffer. When it is the spare's
// array, pgx kept it (the statement was small enough) and it is grown in
// place. A connection is used by one goroutine at a time, and so is its
// spare.
type spare struct{ buf []byte }

// maxSpare bounds what a connection keeps of each buffer: a larger
// statement's buffer is allocated as before and not kept, so a pool holds
// at most two of these per connection.
const maxSpare = 256 << 10

// room returns buf with room for n more bytes, in the spare's array when
// it can be: buf's bytes are copied there when pgx passed a buffer of its
// own.
func (s *spare) room(buf []byte, n int) []byte {
	if unsafe.SliceData(buf) == unsafe.SliceData(s.buf) {
		// pgx kept the spare (or neither has a buffer yet): grow it in place.
		if cap(buf)-len(buf) >= n {
			return buf
		}
		buf = slices.Grow(buf, n)
		if cap(buf) <= maxSpare {
			s.buf = buf[:0]
		}
		return buf
	}
	need := len(buf) + n
	if need > maxSpare {
		return slices.Grow(buf, n)
	}
	if cap(s.buf) < need {
		s.buf = make([]byte, 0, min(max(need, 2*cap(s.buf)), maxSpare))
	}
	return append(s.buf[:0], buf...)
}
