package migrate

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
)

// LockTimeout bounds how long a statement of a transactional migration
// waits for a lock. An ALTER TABLE waiting for its ACCESS EXCLUSIVE lock
// behind a long transaction (a report, a dump, a stuck session) is first in
// the table's lock queue, and every later statement on the table — every
// resource write, every claim — queues behind it: without a bound the whole
// fleet stalls for as long as that transaction runs. With it the migration
// rolls back after LockTimeout, the queue drains, and the runner tries
// again (LockRetryFor).
//
// A migration marked NO TRANSACTION (an index built CONCURRENTLY) runs
// without it: such a build waits for every older transaction but blocks no
// reader or writer meanwhile, and a timeout would only fail it half-way and
// leave an invalid index to rebuild.
const LockTimeout = 2 * time.Second

// LockRetryFor bounds how long Up and Down go on retrying a migration that
// timed out waiting for its locks; the waits between tries grow from
// LockTimeout to LockRetryMaxWait.
const LockRetryFor = 5 * time.Minute

// LockRetryMaxWait is the longest pause between two tries.
const LockRetryMaxWait = 30 * time.Second

// lockNotAvailable is Postgres's lock_not_available: a lock_timeout ran out.
const lockNotAvailable = "55P03"

// withLockTimeout returns the migration files of fsys with
// "SET LOCAL lock_timeout" as the first statement of each section of every
// transactional migration (goose runs each in its own transaction, so the
// setting ends with it).
func withLockTimeout(fsys fs.FS, timeout time.Duration) (fs.FS, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	set := fmt.Sprintf("SET LOCAL lock_timeout = '%dms';\n", timeout.Milliseconds())
	out := fstest.MapFS{}
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		out[name] = &fstest.MapFile{Data: injectLockTimeout(b, set)}
	}
	return out, nil
}

// injectLockTimeout puts set after each Up and Down annotation of src,
// unless src is marked NO TRANSACTION. Annotations are read as goose reads
// them: a comment line holding "+goose", the rest compared without case.
func injectLockTimeout(src []byte, set string) []byte {
	annotation := func(line string) string {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") || !strings.Contains(line, "+goose") {
			return ""
		}
		return strings.ToLower(strings.TrimSpace(strings.Replace(strings.ReplaceAll(line, "--", ""), "+goose", "", 1)))
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 64*1024), len(src)+1)
	for sc.Scan() {
		line := sc.Text()
		switch annotation(line) {
		case "no transaction":
			return src
		case "up", "down":
			out.WriteString(line + "\n" + set)
			continue
		}
		out.WriteString(line + "\n")
	}
	return out.Bytes()
}

// isLockTimeout says whether err is a lock_timeout that ran out.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == lockNotAvailable
}

// failedMigration names the migration a goose error is about ("" if none).
func failedMigration(err error) string {
	var pe *goose.PartialError
	if errors.As(err, &pe) && pe.Failed != nil && pe.Failed.Source != nil {
		return pe.Failed.Source.Path
	}
	return ""
}

// retryLocked runs step until it succeeds, fails with anything but a lock
// timeout, or has kept timing out for LockRetryFor; between tries it waits
// (LockTimeout, doubling, at most LockRetryMaxWait) so the statements that
// queued behind the migration's lock request go through.
func (r *Runner) retryLocked(ctx context.Context, what string, step func() error) error {
	start := time.Now()
	wait := r.lockTimeout
	for attempt := 1; ; attempt++ {
		err := step()
		if err == nil {
			return nil
		}
		if !isLockTimeout(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		name := failedMigration(err)
		if time.Since(start) >= LockRetryFor {
			return fmt.Errorf("%s: migration %s waited for its locks longer than its lock timeout (%s) at each of %d tries over %s "+
				"(a long transaction holds a lock on its table: see pg_stat_activity and pg_locks): %w",
				what, name, r.lockTimeout, attempt, LockRetryFor, err)
		}
		r.log.Warn().Str("migration", name).Int("attempt", attempt).Dur("lock_timeout", r.lockTimeout).Dur("retry_in", wait).
			Msg("migration waited longer than its lock timeout for a table another transaction holds; rolled back, trying again")
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting to retry migration %s: %w", what, name, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, LockRetryMaxWait)
	}
}
