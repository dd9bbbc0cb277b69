package dbauth

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestIAM_MintsAFreshSignedTokenPerConnection(t *testing.T) {
	t.Parallel()
	creds := credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", "")
	hook := IAM("eu-west-1", creds)
	cc, err := pgx.ParseConfig("postgres://app:ignored@db.cluster-x.eu-west-1.rds.amazonaws.com:5432/converge?sslmode=require")
	require.NoError(t, err)
	require.NoError(t, hook(context.Background(), cc))
	require.NotEqual(t, "ignored", cc.Password, "the DSN password is replaced")
	require.True(t, strings.HasPrefix(cc.Password, "db.cluster-x.eu-west-1.rds.amazonaws.com:5432?"), cc.Password)
	q, err := url.ParseQuery(cc.Password[strings.Index(cc.Password, "?")+1:])
	require.NoError(t, err)
	require.Equal(t, "connect", q.Get("Action"))
	require.Equal(t, "app", q.Get("DBUser"))
	require.NotEmpty(t, q.Get("X-Amz-Signature"))
	require.Contains(t, q.Get("X-Amz-Credential"), "AKIDEXAMPLE/")
}

func TestCheckTLS(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason, dsn string
		ok          bool
	}{
		"require":  {reason: "sslmode=require is TLS-only", dsn: "postgres://u@h/db?sslmode=require", ok: true},
		"verify":   {reason: "verify-full is TLS-only", dsn: "postgres://u@h/db?sslmode=verify-full", ok: true},
		"disable":  {reason: "plaintext is refused", dsn: "postgres://u@h/db?sslmode=disable"},
		"prefer":   {reason: "prefer may fall back to plaintext", dsn: "postgres://u@h/db?sslmode=prefer"},
		"defaults": {reason: "the default (prefer) is refused", dsn: "postgres://u@h/db"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := CheckTLS(tc.dsn)
			if tc.ok {
				require.NoError(t, err, tc.reason)
			} else {
				require.Error(t, err, tc.reason)
			}
		})
	}
}
