package pgpool

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"
)

// bindRoom makes room in a connection's write buffer for a statement's
// message before pgx writes it. pgx writes a statement's messages (Parse,
// Bind, Execute, Sync) into one buffer per connection, which it cuts back
// to 1 KB after each flush, so a statement whose arguments are larger (a
// compose's children, an outbox batch, a claim's keys: tens of KB) grew it
// as each argument was copied into the Bind — about twice the message's
// size allocated, and all before each argument copied again, for every
// such statement: the buffer's growth was a fifth of converge's allocated
// bytes in a 100k run. Grown once here, by the size the arguments will
// take, it costs the message's size, once: that is an eighth of the
// allocated bytes saved (an allocation profile over 15 s of a 100k run,
// before and after).
//
// The room is made in the connection's spare (spare.go), which pgx's
// buffer of the statement before no longer holds: a statement's message
// then allocates nothing.
//
// It is a QueryTracer because that is the one hook pgx calls, with the
// statement's arguments and its connection, before it writes the
// statement; it writes nothing, and traces nothing.
type bindRoom struct{}

// keptBuffer is the size pgx cuts its write buffer back to after a flush.
const keptBuffer = 1024

// writeSpareKey keys a connection's write buffer spare in its CustomData.
const writeSpareKey = "pgpool.writeSpare"

func (bindRoom) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if n := messageSize(d.SQL, d.Args); n > keptBuffer {
		data := c.PgConn().CustomData()
		r, _ := data[writeSpareKey].(*room)
		if r == nil {
			r = &room{}
			data[writeSpareKey] = r
		}
		r.n = n
		c.PgConn().Frontend().Send(r)
	}
	return ctx
}

func (bindRoom) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// messageSize is about what a statement's messages take in the write
// buffer: its text (the Parse), a length and a format for each argument,
// and the arguments: a Reserve'd statement's size counts every argument;
// elsewhere the strings and byte slices, which are most of any other.
// An estimate that falls short costs a growth, as before.
func messageSize(sql string, args []any) int {
	n := 256 + len(sql) + 8*len(args)
	for _, a := range args {
		switch v := a.(type) {
		case reserved:
			return n + v.size
		case string:
			n += len(v)
		case []byte:
			n += len(v)
		case json.RawMessage:
			n += len(v)
		}
	}
	return n
}

// room is a message of no bytes whose encoding leaves the write buffer
// with room for n more, in the connection's spare: pgx appends the
// statement's messages after it. One per connection (a pointer, so sending
// it allocates nothing).
type room struct {
	spare
	n int
}

func (*room) Frontend() {}

func (r *room) Encode(dst []byte) ([]byte, error) { return r.room(dst, r.n), nil }

func (*room) Decode([]byte) error { return errors.New("pgpool: room is never received") }
