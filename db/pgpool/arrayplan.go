package pgpool

import (
	"encoding/binary"
	"encoding/json"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// arrayCodec stands in front of an array type's codec and encodes the
// Arrays of its element in binary itself, in one pass (arrayPlan); every
// other value, the text format and every scan go to the codec it wraps.
type arrayCodec struct {
	pgtype.Codec                                   // the array type's own codec (a *pgtype.ArrayCodec)
	planFor      func(value any) pgtype.EncodePlan // nil: not an Array this codec encodes
	args         *spare                            // the connection's argument buffer spare (argSpare), shared by its array codecs
}

func (c arrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if format == pgtype.BinaryFormatCode {
		if _, ok := value.(reserved); ok {
			return reservePlan{m: m, oid: oid, args: c.args}
		}
		if p := c.planFor(value); p != nil {
			return p
		}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

// Reserve is a statement's arguments with its first Array marked to make
// room, before it is encoded, for every Array among them: pgx appends a
// statement's parameters one after another to a buffer it starts small
// for each statement, and an Array alone can only grow it for itself, so
// a multi-array statement (the outbox append has fourteen) grew it once
// per Array, doubling as it went: three times its final size allocated,
// 13% of converge's allocation in a 200k run. Reserved, it grows once, by
// the statement's size. Only the first Array's parameter must be of an
// array type RegisterArrays or RegisterUUID set up (uuid[], text[],
// bigint[], int[], bool[], jsonb[]) for the room to be made; elsewhere the
// Array is encoded as it would be unreserved. args is changed in place.
func Reserve(args ...any) []any {
	first, total := -1, 0
	for i, a := range args {
		s, ok := a.(sizer)
		if !ok {
			total += 16 // a scalar: room for its value
			continue
		}
		if first < 0 {
			first = i
		}
		total += s.encodedSize()
	}
	if first >= 0 {
		args[first] = reserved{arg: args[first], size: total}
	}
	return args
}

// sizer is an Array, which knows its encoded size.
type sizer interface{ encodedSize() int }

// reserved is an argument that makes room for size bytes, then encodes
// as arg. On a connection whose type map lacks the plans (a pool not built
// by Config), it is the Array it wraps to pgx's own array codec
// (pgtype.ArrayGetter): encoded element by element, without the room.
type reserved struct {
	arg  any // an Array
	size int
}

func (r reserved) Dimensions() []pgtype.ArrayDimension {
	return r.arg.(pgtype.ArrayGetter).Dimensions()
}

func (r reserved) Index(i int) any { return r.arg.(pgtype.ArrayGetter).Index(i) }

func (r reserved) IndexType() any { return r.arg.(pgtype.ArrayGetter).IndexType() }

// reservePlan grows the buffer by the reserved size, in the connection's
// spare (spare.go), and encodes the argument with the plan m has for it
// (pgx caches plans by the value's type, and reserved wraps Arrays of
// every element type).
type reservePlan struct {
	m    *pgtype.Map
	oid  uint32
	args *spare
}

func (p reservePlan) Encode(value any, buf []byte) ([]byte, error) {
	r := value.(reserved)
	if cap(buf)-len(buf) < r.size {
		buf = p.args.room(buf, r.size)
	}
	return p.m.Encode(p.oid, pgtype.BinaryFormatCode, r.arg, buf)
}

// encodedSize is the size of a's binary array form (0: NULL): the header
// (dimensions, has-null flag, element type), its one dimension (length,
// lower bound) unless empty, and each element's length and bytes.
func (a Array[T]) encodedSize() int {
	if a == nil {
		return 0
	}
	if len(a) == 0 {
		return 12
	}
	n := 12 + 8 + 4*len(a)
	for i := range a {
		n += max(elemSize(&a[i]), 0)
	}
	return n
}

// elemSize is the size of an element's binary form; -1: NULL.
func elemSize[T Element](v *T) int {
	switch e := any(v).(type) {
	case *uuid.UUID:
		return 16
	case *string:
		return len(*e)
	case **string:
		if *e == nil {
			return -1
		}
		return len(**e)
	case *int64:
		return 8
	case *int32:
		return 4
	case *bool:
		return 1
	case **bool:
		if *e == nil {
			return -1
		}
		return 1
	case *json.RawMessage:
		if *e == nil {
			return -1
		}
		return 1 + len(*e)
	}
	panic("pgpool: no binary size for the element type") // Element lists only the types above
}

// wrapArray puts an arrayCodec in front of the codec m has for the array
// type name (left alone if m has none).
func wrapArray(m *pgtype.Map, name string, planFor func(value any) pgtype.EncodePlan) {
	t, ok := m.TypeForName(name)
	if !ok {
		return
	}
	m.RegisterType(&pgtype.Type{Name: t.Name, OID: t.OID, Codec: arrayCodec{Codec: t.Codec, planFor: planFor, args: argSpare(m)}})
}

// wrappedArrays are the array types whose codecs RegisterArrays and
// RegisterUUID wrap.
var wrappedArrays = []string{"_uuid", "_text", "_int8", "_int4", "_bool", "_jsonb"}

// argSpare is the argument buffer spare of m's connection: the one its
// array codecs already share, or a new one for the first. (A type map is
// its connection's, and the one place a plan reaches of it.)
func argSpare(m *pgtype.Map) *spare {
	for _, name := range wrappedArrays {
		if t, ok := m.TypeForName(name); ok {
			if c, ok := t.Codec.(arrayCodec); ok {
				return c.args
			}
		}
	}
	return &spare{}
}

// arrayPlan encodes an Array[T] as a one-dimensional Postgres array in
// binary: it sizes the whole array first and grows the buffer once, then
// writes each element where it lies.
//
// pgx's own array plan asks an element's plan for every element through an
// interface and appends to a buffer that starts small for every statement
// (pgx drops a parameter buffer past 256 bytes after each one), so a
// 256-row statement's buffer was reallocated a dozen times or more as it
// grew by a quarter at a time: that growth was 18% of everything converge
// allocated in the leaf phase of a 1M-leaf run. Here a statement's
// parameters, each appended to the same buffer, reallocate it at most once
// each, and at least double it when they do; a statement whose arguments
// went through Reserve grows it once, by exactly what it needs.
type arrayPlan[T Element] struct {
	elemOID uint32
	put     func(buf []byte, v *T) []byte // appends v's binary form (elemSize bytes; never called for a NULL)
}

// planIf is p if value is an Array[T], else nil.
func planIf[T Element](value any, p arrayPlan[T]) pgtype.EncodePlan {
	if _, ok := value.(Array[T]); ok {
		return p
	}
	return nil
}

func (p arrayPlan[T]) Encode(value any, buf []byte) ([]byte, error) {
	a := value.(Array[T])
	if a == nil {
		return nil, nil // a NULL array
	}
	if need := a.encodedSize(); cap(buf)-len(buf) < need {
		buf = slices.Grow(buf, max(need, len(buf)))
	}
	if len(a) == 0 {
		// No dimensions: Postgres' own form of an empty array.
		buf = binary.BigEndian.AppendUint32(buf, 0)
		buf = binary.BigEndian.AppendUint32(buf, 0)
		return binary.BigEndian.AppendUint32(buf, p.elemOID), nil
	}
	buf = binary.BigEndian.AppendUint32(buf, 1)
	hasNull := len(buf)
	buf = binary.BigEndian.AppendUint32(buf, 0) // set below if an element is NULL
	buf = binary.BigEndian.AppendUint32(buf, p.elemOID)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(a)))
	buf = binary.BigEndian.AppendUint32(buf, 1)
	for i := range a {
		n := elemSize(&a[i])
		buf = binary.BigEndian.AppendUint32(buf, uint32(int32(n))) //nolint:gosec // -1 is NULL's length, on purpose
		if n >= 0 {
			buf = p.put(buf, &a[i])
		} else {
			binary.BigEndian.PutUint32(buf[hasNull:], 1)
		}
	}
	return buf, nil
}

// The element forms Arrays are encoded in: Postgres' binary send format of
// each element type.
var (
	uuidElems = arrayPlan[uuid.UUID]{elemOID: pgtype.UUIDOID, put: appendUUID}
	textElems = arrayPlan[string]{elemOID: pgtype.TextOID,
		put: func(buf []byte, v *string) []byte { return append(buf, *v...) }}
	nullTextElems = arrayPlan[*string]{elemOID: pgtype.TextOID,
		put: func(buf []byte, v **string) []byte { return append(buf, **v...) }}
	int8Elems = arrayPlan[int64]{elemOID: pgtype.Int8OID,
		put: func(buf []byte, v *int64) []byte { return binary.BigEndian.AppendUint64(buf, uint64(*v)) }} //nolint:gosec // two's complement, as int8send
	int4Elems = arrayPlan[int32]{elemOID: pgtype.Int4OID,
		put: func(buf []byte, v *int32) []byte { return binary.BigEndian.AppendUint32(buf, uint32(*v)) }} //nolint:gosec // two's complement, as int4send
	boolElems = arrayPlan[bool]{elemOID: pgtype.BoolOID,
		put: func(buf []byte, v *bool) []byte { return append(buf, boolByte(*v)) }}
	nullBoolElems = arrayPlan[*bool]{elemOID: pgtype.BoolOID,
		put: func(buf []byte, v **bool) []byte { return append(buf, boolByte(**v)) }}
	jsonbElems = arrayPlan[json.RawMessage]{elemOID: pgtype.JSONBOID,
		put: appendJSONB}
)

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// registerArrayPlans puts the one-pass plans in front of the array types
// the store's statements pass Arrays for (uuid[]'s is RegisterUUID's).
func registerArrayPlans(m *pgtype.Map) {
	wrapArray(m, "_text", func(v any) pgtype.EncodePlan {
		if p := planIf(v, textElems); p != nil {
			return p
		}
		return planIf(v, nullTextElems)
	})
	wrapArray(m, "_int8", func(v any) pgtype.EncodePlan { return planIf(v, int8Elems) })
	wrapArray(m, "_int4", func(v any) pgtype.EncodePlan { return planIf(v, int4Elems) })
	wrapArray(m, "_bool", func(v any) pgtype.EncodePlan {
		if p := planIf(v, boolElems); p != nil {
			return p
		}
		return planIf(v, nullBoolElems)
	})
	wrapArray(m, "_jsonb", func(v any) pgtype.EncodePlan { return planIf(v, jsonbElems) })
}
