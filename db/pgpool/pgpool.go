// Package pgpool builds the pgx pool configuration every converge process,
// benchmark and test uses, so the session settings the store's statements
// rely on are set in one place.
package pgpool

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SessionParams are set on every physical connection at startup.
//
// jit=off: the store's statements are short OLTP statements and plpgsql
// batches whose cost estimates grow with table size, not with the work they
// do. Past jit_above_cost Postgres compiles them with LLVM on every
// execution — hundreds of milliseconds for a statement that runs in two
// (a rollup's subtree read took 215–285 ms with JIT and 2.2 ms without at
// 100k rows). Nothing on the store's paths runs long enough to repay a
// compile, so JIT is off for our sessions only; an operator's ad-hoc
// analytics sessions keep the server's setting.
//
// idle_in_transaction_session_timeout=60s: a member cut off from the
// database in the middle of a transaction (a partition, a hung process)
// leaves its backend idle in that transaction, holding its row locks —
// the resources a drain or a compose had locked, the queue rows a claim had
// — and every drain that reaches those rows waits behind it for as long as
// the cut lasts (the server's TCP keepalive takes hours by default). No
// transaction of ours waits on its client for more than a moment between
// statements, so the server ends one that has for a minute, and its locks go
// with it. Operators' own sessions keep the server's setting.
var SessionParams = map[string]string{
	"jit":                                 "off",
	"idle_in_transaction_session_timeout": "60s",
}

// Config parses url and applies SessionParams. maxConns > 0 caps the pool.
func Config(url string, maxConns int32) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	for k, v := range SessionParams {
		if _, set := pc.ConnConfig.RuntimeParams[k]; !set {
			pc.ConnConfig.RuntimeParams[k] = v
		}
	}
	if maxConns > 0 {
		pc.MaxConns = maxConns
	}
	pc.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		RegisterUUID(c.TypeMap())
		RegisterArrays(c.TypeMap())
		return nil
	}
	return pc, nil
}
