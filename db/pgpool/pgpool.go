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
var SessionParams = map[string]string{
	"jit": "off",
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
		return nil
	}
	return pc, nil
}
