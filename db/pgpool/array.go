package pgpool

import (
	"encoding/json"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// Element is what an Array holds: the element types of the hot statements'
// array parameters (uuid[], text[], bigint[], int[], bool[], jsonb[]); a nil
// *string or *bool, like a nil json.RawMessage, is a NULL element.
type Element interface {
	uuid.UUID | string | *string | int64 | int32 | bool | *bool | json.RawMessage
}

// Array is a slice passed as a Postgres array parameter, its elements
// encoded where they lie. pgx encodes a plain slice by boxing each element
// into an interface: an allocation per element for a []string or an
// []int64, and for a []uuid.UUID reflection and two allocations. The
// broker's multi-row statements (outbox appends, compose writes) pass
// thousands of elements a second, and those allocations were a quarter of
// converge's at a 100k run. In binary (as pgx sends arrays), the array types
// RegisterUUID and RegisterArrays set up encode an Array in one pass
// (arrayPlan); elsewhere Array hands pgx a pointer to each element, which the
// element plans RegisterArrays adds encode without a copy. A nil Array is a
// NULL array, as a nil slice is.
type Array[T Element] []T

// Dimensions is the array's one dimension (nil: NULL).
func (a Array[T]) Dimensions() []pgtype.ArrayDimension {
	if a == nil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

// Index is a pointer to element i: boxing a pointer does not allocate.
func (a Array[T]) Index(i int) any { return &a[i] }

// IndexType is the type Index returns, for pgx to plan the elements.
func (a Array[T]) IndexType() any { return (*T)(nil) }

// RegisterArrays teaches a connection's type map to encode the elements an
// Array hands out: *uuid.UUID (in uuidCodec), *string, *int64 and, for
// jsonb, *json.RawMessage. Without them pgx dereferences a pointer through
// reflection, which allocates the copy again. A nil pointer is NULL, as
// before, and so is a nil json.RawMessage; only the copy is saved.
// The array types of text, bigint, int, bool and jsonb then encode an Array
// of their element in one pass (registerArrayPlans).
func RegisterArrays(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapStringPtr, tryWrapInt64Ptr}, m.TryWrapEncodePlanFuncs...)
	if t, ok := m.TypeForName("jsonb"); ok {
		jt := &pgtype.Type{Name: "jsonb", OID: pgtype.JSONBOID, Codec: ptrCodec[json.RawMessage]{Codec: t.Codec, appendTo: appendJSONB}}
		m.RegisterType(jt)
		m.RegisterType(&pgtype.Type{Name: "_jsonb", OID: pgtype.JSONBArrayOID, Codec: &pgtype.ArrayCodec{ElementType: jt}})
	}
	registerArrayPlans(m)
}

// ptrCodec is a codec that also encodes a *T (an Array's element) in
// binary by appending the value where it lies; every other value, and
// every scan, goes to the codec it wraps (which would dereference the
// pointer through reflection first).
type ptrCodec[T any] struct {
	pgtype.Codec
	appendTo func(buf []byte, v *T) []byte // nil: NULL
}

func (c ptrCodec[T]) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.(*T); ok && format == pgtype.BinaryFormatCode {
		return appendPtrPlan[T](c.appendTo)
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

// appendPtrPlan encodes a *T by appending it to buf; a nil *T is NULL.
type appendPtrPlan[T any] func(buf []byte, v *T) []byte

func (p appendPtrPlan[T]) Encode(value any, buf []byte) ([]byte, error) {
	v := value.(*T)
	if v == nil {
		return nil, nil
	}
	return p(buf, v), nil
}

// appendJSONB is a document in jsonb's binary format: its version byte (1),
// then the text. A nil document is NULL.
func appendJSONB(buf []byte, r *json.RawMessage) []byte {
	if *r == nil {
		return nil
	}
	return append(append(buf, 1), *r...)
}

// ptrEncodePlan encodes a *T as the valuer as makes of it (a pointer
// conversion, no copy); a nil *T is NULL.
type ptrEncodePlan[T any] struct {
	next pgtype.EncodePlan
	as   func(*T) any
}

func (p *ptrEncodePlan[T]) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *ptrEncodePlan[T]) Encode(value any, buf []byte) ([]byte, error) {
	v := value.(*T)
	if v == nil {
		return nil, nil
	}
	return p.next.Encode(p.as(v), buf)
}

// tryWrapPtr plans a *T as the valuer as makes of it: as(nil) is that
// valuer's type, for pgx to plan the next step.
func tryWrapPtr[T any](as func(*T) any) pgtype.TryWrapEncodePlanFunc {
	return func(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
		if _, ok := value.(*T); ok {
			return &ptrEncodePlan[T]{as: as}, as(nil), true
		}
		return nil, nil, false
	}
}

// textRef is a *string as pgtype's text codecs read it (TextValuer).
type textRef string

func (t *textRef) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*t), Valid: true}, nil
}

var tryWrapStringPtr = tryWrapPtr(func(s *string) any { return (*textRef)(s) })

// int8Ref is a *int64 as pgtype's integer codecs read it (Int64Valuer).
type int8Ref int64

func (v *int8Ref) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*v), Valid: true}, nil
}

var tryWrapInt64Ptr = tryWrapPtr(func(v *int64) any { return (*int8Ref)(v) })
