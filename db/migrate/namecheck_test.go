package migrate_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/db/pgtest"
)

// The three object-name CHECKs admit exactly the names of the name rule
// (resource.ValidName, itself checked against the rule's regular
// expression): at the length bound, at the edges and for random strings of
// the rule's characters and a few others.
func TestNameChecks_AdmitExactlyTheNameRule(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	names := []string{"a", "0", "ab", "a-b", "a.b_c", "-a", "a-", ".a", "a_", "A", "a b", "é", "a\\b",
		strings.Repeat("a", 253), strings.Repeat("a", 254), "a" + strings.Repeat("-", 251) + "a", "a" + strings.Repeat(".", 252) + "a"}
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "az09._-A/é"
	for range 300 {
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			b.WriteString(string([]rune(alphabet)[rng.IntN(len([]rune(alphabet)))]))
		}
		names = append(names, b.String())
	}
	stmts := map[string]string{
		"resources_name_check":        `INSERT INTO resources (kind, version, name, shard_id) VALUES ('namecheck', 'v1', $1, 0)`,
		"providerconfigs_name_check":  `INSERT INTO providerconfigs (kind, name) VALUES ('namecheck', $1)`,
		"reactor_bindings_name_check": `INSERT INTO reactor_bindings (name, watch_kind, transition, reactor) VALUES ($1, 'namecheck', 'synced', 'namecheck-sink')`,
	}
	for constraint, stmt := range stmts {
		for _, name := range names {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, stmt, name)
			_ = tx.Rollback(ctx)
			var pgErr *pgconn.PgError
			refused := errors.As(err, &pgErr) && pgErr.ConstraintName == constraint
			if !refused {
				require.NoError(t, err, "%s %q", constraint, name)
			}
			require.Equal(t, !resource.ValidName(name), refused, "%s on %q", constraint, name)
		}
	}
}
