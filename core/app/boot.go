package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/dbauth"
	"github.com/converge-run/converge/core/tlsreload"
	"github.com/converge-run/converge/db/migrate"
	"github.com/converge-run/converge/db/pgpool"
)

// migrateAtBoot applies the function set and pending migrations under the
// runner's session advisory lock: of several pods booting at once exactly one
// applies them.
func migrateAtBoot(ctx context.Context, cfg config.Config, hook dbauth.Hook, log zerolog.Logger) error {
	r, err := migrate.OpenWith(cfg.DatabaseURL, migrate.Options{BeforeConnect: hook, Log: log})
	if err != nil {
		return err
	}
	defer r.Close()
	return MigrateUp(ctx, r, log)
}

// MigrateUp applies the function set and pending migrations through r and
// logs the outcome (a warning when a newer function set is present); boot
// and `converge migrate up` both use it.
func MigrateUp(ctx context.Context, r *migrate.Runner, log zerolog.Logger) error {
	rep, err := r.Up(ctx)
	if err != nil {
		return err
	}
	v, err := r.Version(ctx)
	if err != nil {
		return err
	}
	if rep.Functions.Action == migrate.FunctionsNewerPresent {
		log.Warn().Int64("functions_embedded", rep.Functions.Embedded).Int64("functions_version", rep.Functions.Recorded).
			Msg("a newer function set is present (a newer binary migrated this database); leaving it alone")
	}
	for _, ix := range rep.InvalidIndexes {
		log.Warn().Str("index", ix).
			Msg("index is invalid (a concurrent build failed): every write maintains it and no read uses it; " +
				"rebuild it with REINDEX INDEX CONCURRENTLY")
	}
	log.Info().Int("applied", rep.Migrations).Int64("schema_version", v).
		Str("functions", string(rep.Functions.Action)).Int64("functions_version", rep.Functions.Recorded).
		Msg("schema migrated")
	return nil
}

// AuthHook returns the IAM token hook when DB_IAM_AUTH is on (after checking
// that every DSN requires TLS, and warning once for each whose TLS does not
// verify the server), else nil: the DSN password is used as is.
func AuthHook(ctx context.Context, cfg config.Config, log zerolog.Logger) (dbauth.Hook, error) {
	if !cfg.DBIAMAuth {
		return nil, nil
	}
	for _, dsn := range []string{cfg.DatabaseURL, cfg.DatabaseReadURL} {
		if dsn == "" {
			continue
		}
		if err := dbauth.CheckTLS(dsn); err != nil {
			return nil, err
		}
	}
	dbauth.WarnUnverified(log, map[string]string{"DATABASE_URL": cfg.DatabaseURL, "DATABASE_READ_URL": cfg.DatabaseReadURL})
	return dbauth.LoadIAM(ctx)
}

// openPool opens a pgx pool with connection recycling (30 min, jittered),
// its sessions named after memberID (pgpool.NameSessions); hook (IAM
// tokens) runs before every new physical connection.
func openPool(ctx context.Context, url string, maxConns int32, memberID string, hook dbauth.Hook) (*pgxpool.Pool, error) {
	pc, err := pgpool.Config(url, maxConns)
	if err != nil {
		return nil, err
	}
	pgpool.NameSessions(pc, memberID)
	if hook != nil {
		pc.BeforeConnect = hook
	}
	pc.MaxConnLifetime = 30 * time.Minute
	pc.MaxConnLifetimeJitter = 5 * time.Minute
	pc.HealthCheckPeriod = 30 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping database: %w", err)
	}
	return pool, nil
}

func tlsOf(r *tlsreload.Reloader) *tls.Config {
	if r == nil {
		return nil
	}
	return r.ServerConfig()
}

// advertisedBrokerURL is how peer brokers reach this broker: BROKER_URL when
// set, else the bound broker listener with this host's name in place of a
// wildcard address.
func (p *Process) advertisedBrokerURL() string {
	if p.Config.BrokerURL != "" {
		return p.Config.BrokerURL
	}
	a := p.Addr("broker")
	if a == nil {
		a = p.Addr("api")
	}
	if a == nil {
		return ""
	}
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	scheme := "http"
	if p.Config.Secure() {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

func withBrokerURL(cfg map[string]any, url string) map[string]any {
	out := make(map[string]any, len(cfg)+1)
	for k, v := range cfg {
		out[k] = v
	}
	out["BROKER_URL"] = url
	return out
}
