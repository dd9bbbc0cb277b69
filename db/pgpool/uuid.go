package pgpool

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// RegisterUUID teaches a connection's type map to encode
// github.com/google/uuid values as Postgres uuid in binary, 16 bytes each.
// Without it pgx reaches uuid.UUID through database/sql's Valuer: every id
// of every uuid[] parameter is formatted to 36 characters and parsed back —
// 5% of converge's CPU on the outbox append and claim paths at 30k leaves.
// Scans are left to uuid.UUID's sql.Scanner, which pgx always prefers.
func RegisterUUID(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapUUIDEncode}, m.TryWrapEncodePlanFuncs...)
	m.RegisterDefaultPgType(uuid.UUID{}, "uuid")
	m.RegisterDefaultPgType([]uuid.UUID{}, "_uuid")
}

// pgUUID is a uuid.UUID as pgtype's UUID codec reads and writes it.
type pgUUID uuid.UUID

func (u pgUUID) UUIDValue() (pgtype.UUID, error) { return pgtype.UUID{Bytes: u, Valid: true}, nil }

type uuidEncodePlan struct{ next pgtype.EncodePlan }

func (p *uuidEncodePlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *uuidEncodePlan) Encode(value any, buf []byte) ([]byte, error) {
	return p.next.Encode(pgUUID(value.(uuid.UUID)), buf)
}

func tryWrapUUIDEncode(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	if u, ok := value.(uuid.UUID); ok {
		return &uuidEncodePlan{}, pgUUID(u), true
	}
	return nil, nil, false
}
