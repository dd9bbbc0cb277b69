// Package pgpool builds the pgx pool configuration every converge process,
// benchmark and test uses, so the session settings the store's statements
// rely on are set in one place.
package pgpool

import (
	"context"
	"fmt"
	"strings"

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
// the cut lasts (the server's TCP keepalive takes hours by default). The
// peer that removes the cut-off member ends its sessions' transactions at
// once (NameSessions); this bounds the rest: no transaction of ours waits on
// its client for more than a moment between statements, so the server ends
// one that has for a minute, and its locks go with it. Operators' own
// sessions keep the server's setting.
var SessionParams = map[string]string{
	"jit":                                 "off",
	"idle_in_transaction_session_timeout": "60s",
}

// NameSessions makes every session of pc carry memberID as its
// application_name, unless the database URL names one (the operator's name
// wins). A peer that removes the member from the cluster (its liveness lock
// gone: crashed, or cut off behind something that keeps its connections
// open) ends the member's sessions still in a transaction by that name
// (reap_unlocked_cluster_members): a transaction whose client is cut off
// keeps its row locks until the cut heals, and the peers that took over the
// member's shards would wait behind them. Postgres keeps the first 63 bytes
// of a name; member ids are ASCII.
func NameSessions(pc *pgxpool.Config, memberID string) {
	if _, set := pc.ConnConfig.RuntimeParams["application_name"]; !set && memberID != "" {
		pc.ConnConfig.RuntimeParams["application_name"] = memberID
	}
}

// ExecMode is how every statement of ours is sent: as the unnamed
// statement, planned by Postgres on every call with that call's arguments.
// pgx caches the statement's description (its parameter and result types)
// per connection, so a call is one round trip, as with a prepared statement.
//
// pgx's own default prepares each statement under a name and keeps it for
// the session, and Postgres, after five calls whose custom plans cost no
// less than the generic one, switches that statement to the generic plan
// and keeps it. A generic plan made while the tables were small — a fresh
// install, a test's first calls, a shard's partition just emptied — is a
// Seq Scan, and it is kept while the tables grow, until an ANALYZE
// invalidates it: a read by key that scans a million rows on every call.
// The empty-table plan tests found a dozen such statements (the claim, a
// lost attempt's count, the reactor's ack, the API's point reads and
// dataloader batches, a rollup's reads); planned per call, none can keep
// one. Planning costs nothing measurable here: the statements are short,
// the hot path's large ones (the drain, the gates) are plpgsql functions
// whose inner plans are the function's own concern (their SET clauses),
// and pg_stat_statements put the planning at 0.030 ms of 0.86 ms of
// statement time per leaf in a 100k run either way.
//
// What this cannot reach are the plans a session keeps below a statement:
// plpgsql's and each foreign key's check plan. The writes that fire those
// run with seq scans off (core/store's dbx.ByKeyOnly), and the plan tests
// hold both. A database URL that names its own default_query_exec_mode (a
// pooler in front of Postgres may want exec or simple_protocol) keeps it.
const ExecMode = pgx.QueryExecModeCacheDescribe

// MinURLPoolSize is the smallest pool_max_conns a database URL may name:
// two sessions are held for the process's life (the liveness lock and the
// LISTEN session), and the drainer, the claims and the API share the rest.
const MinURLPoolSize = 10

// Config parses url and applies SessionParams and ExecMode, and makes room
// for each statement's message before pgx writes it (bindRoom). maxConns > 0
// caps the pool, unless the URL names its own pool_max_conns: the
// operator's size wins, as the URL's session settings do.
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
	if !strings.Contains(pc.ConnString(), "default_query_exec_mode") {
		pc.ConnConfig.DefaultQueryExecMode = ExecMode
	}
	switch {
	case strings.Contains(pc.ConnString(), "pool_max_conns"):
		if pc.MaxConns < MinURLPoolSize {
			return nil, fmt.Errorf("database url: pool_max_conns=%d: want at least %d (a process holds two sessions for good: its liveness lock and LISTEN)",
				pc.MaxConns, MinURLPoolSize)
		}
	case maxConns > 0:
		pc.MaxConns = maxConns
	}
	pc.ConnConfig.Tracer = bindRoom{}
	pc.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		RegisterUUID(c.TypeMap())
		RegisterArrays(c.TypeMap())
		return nil
	}
	return pc, nil
}
