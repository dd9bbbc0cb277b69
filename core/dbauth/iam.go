// Package dbauth authenticates database connections with short-lived AWS
// IAM tokens (RDS / Aurora Postgres, DB_IAM_AUTH=true). Every new physical
// connection — pool growth, the 30-minute recycle, a health-check reconnect,
// the migration runner — mints a fresh token from the pod's current AWS
// credentials in pgx's BeforeConnect hook, so a credential rotation is picked
// up in flight with no restart. The DSN still supplies host, port, user and
// database; its password is ignored.
package dbauth

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/rds/auth"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"
)

// Hook is a pgx BeforeConnect hook.
type Hook func(ctx context.Context, cc *pgx.ConnConfig) error

// IAM returns the token hook for credentials in region.
func IAM(region string, creds aws.CredentialsProvider) Hook {
	return func(ctx context.Context, cc *pgx.ConnConfig) error {
		endpoint := net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
		tok, err := auth.BuildAuthToken(ctx, endpoint, region, cc.User, creds)
		if err != nil {
			return fmt.Errorf("mint IAM auth token for %s@%s: %w", cc.User, endpoint, err)
		}
		cc.Password = tok
		return nil
	}
}

// LoadIAM resolves region and credentials from the AWS default chain (env,
// shared config, IRSA web identity, ECS/EKS/EC2 roles) and fails fast when
// either is missing, rather than on the first query.
func LoadIAM(ctx context.Context) (Hook, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("DB_IAM_AUTH: load AWS config: %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New("DB_IAM_AUTH: no AWS region (set AWS_REGION)")
	}
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return nil, fmt.Errorf("DB_IAM_AUTH: no AWS credentials: %w", err)
	}
	return IAM(cfg.Region, cfg.Credentials), nil
}

// CheckTLS refuses a DSN that does not require TLS: IAM auth needs it.
func CheckTLS(dsn string) error {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("parse database url: %w", err)
	}
	if cc.TLSConfig == nil {
		return errors.New("DB_IAM_AUTH needs TLS: set sslmode=require (or verify-full) in the database URL")
	}
	for _, fb := range cc.Fallbacks {
		if fb.TLSConfig == nil {
			return errors.New("DB_IAM_AUTH needs TLS: sslmode must not allow a plaintext fallback (use require or stronger)")
		}
	}
	return nil
}

// Unverified reports how TLS under dsn leaves the server's identity
// unverified, or "" when it verifies it (sslmode=verify-full) or is not TLS
// at all (CheckTLS refuses that). sslmode=require encrypts but checks no
// certificate, and verify-ca (also require beside an sslrootcert, as in
// libpq) checks the chain but not that the certificate names the host, when
// the RDS CA signs every RDS endpoint: either way a connection can reach an
// impersonator, and the IAM token it sends is good against the database for
// its 15 minutes.
func Unverified(dsn string) (string, error) {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", fmt.Errorf("parse database url: %w", err)
	}
	weakest := ""
	for _, fb := range append([]*pgconn.FallbackConfig{{TLSConfig: cc.TLSConfig}}, cc.Fallbacks...) {
		switch t := fb.TLSConfig; {
		case t == nil || !t.InsecureSkipVerify:
		case t.VerifyPeerCertificate == nil:
			return "sslmode=require checks no certificate", nil
		default:
			weakest = "sslmode=verify-ca checks the certificate's chain but not that it names the host"
		}
	}
	return weakest, nil
}

// WarnUnverified logs one warning for each database URL (by its variable's
// name) whose TLS leaves the server unverified (Unverified): DB_IAM_AUTH
// accepts sslmode=require, as documented, but a token can then be sent to
// an impersonator. An empty or unparsable URL is skipped (CheckTLS reports
// the latter).
func WarnUnverified(log zerolog.Logger, urls map[string]string) {
	for _, name := range slices.Sorted(maps.Keys(urls)) {
		dsn := urls[name]
		if dsn == "" {
			continue
		}
		why, err := Unverified(dsn)
		if err != nil || why == "" {
			continue
		}
		log.Warn().Str("variable", name).Str("tls", why).
			Msg("DB_IAM_AUTH over TLS that does not verify the database server: a connection can reach an impersonator, " +
				"and the IAM token it sends is good for 15 minutes; use sslmode=verify-full with the RDS CA bundle (sslrootcert=)")
	}
}
