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
	"net"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/rds/auth"
	"github.com/jackc/pgx/v5"
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
