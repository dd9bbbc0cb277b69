package dbauth

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/testlog"
	"github.com/converge-run/converge/core/tlsreload/tlstest"
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

// isolateAWS points the AWS default chain at the environment alone: no
// shared config or credentials files, no instance metadata service.
func isolateAWS(t *testing.T) {
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_CONFIG_FILE": dir + "/config", "AWS_SHARED_CREDENTIALS_FILE": dir + "/credentials",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_PROFILE": "", "AWS_REGION": "", "AWS_DEFAULT_REGION": "",
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "",
		"AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_ROLE_ARN": "",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "",
	} {
		t.Setenv(k, v)
	}
}

// TestLoadIAM_FailsFastWithoutRegionOrCredentials: DB_IAM_AUTH resolves its
// region and credentials at start-up and says which is missing, instead of
// failing the first connection; with both, the hook signs for that region.
func TestLoadIAM_FailsFastWithoutRegionOrCredentials(t *testing.T) {
	isolateAWS(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	_, err := LoadIAM(t.Context())
	require.ErrorContains(t, err, "DB_IAM_AUTH: no AWS region (set AWS_REGION)")

	isolateAWS(t)
	t.Setenv("AWS_REGION", "eu-west-1")
	_, err = LoadIAM(t.Context())
	require.ErrorContains(t, err, "DB_IAM_AUTH: no AWS credentials")

	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	hook, err := LoadIAM(t.Context())
	require.NoError(t, err)
	cc, err := pgx.ParseConfig("postgres://app@db.example:5432/converge?sslmode=require")
	require.NoError(t, err)
	require.NoError(t, hook(t.Context(), cc))
	q, err := url.ParseQuery(cc.Password[strings.Index(cc.Password, "?")+1:])
	require.NoError(t, err)
	require.Contains(t, q.Get("X-Amz-Credential"), "AKIDEXAMPLE/", "signed with the environment's key")
	require.Contains(t, q.Get("X-Amz-Credential"), "/eu-west-1/rds-db/", "for the environment's region")
}

// sslmode=require encrypts but verifies no certificate, and verify-ca
// verifies the chain but not that the certificate names the host (the RDS
// CA signs every RDS endpoint): either way a short-lived IAM token can be
// sent to an impersonator, who can replay it against the database for its
// 15 minutes. The documented minimum is still require, so both are
// accepted (CheckTLS) and reported (Unverified) for a warning at boot;
// verify-full is not.
func TestUnverified_NamesTheModesThatDoNotVerifyTheServer(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason, dsn, want string
	}{
		"require": {reason: "encrypted, nothing verified", dsn: "postgres://u@h/db?sslmode=require", want: "sslmode=require"},
		"require with a root cert": {reason: "libpq's require with a root certificate is verify-ca",
			dsn: "postgres://u@h/db?sslmode=require&sslrootcert=" + writeCA(t), want: "sslmode=verify-ca"},
		"verify-ca":   {reason: "the chain, not the host name", dsn: "postgres://u@h/db?sslmode=verify-ca&sslrootcert=" + writeCA(t), want: "sslmode=verify-ca"},
		"verify-full": {reason: "the server is verified", dsn: "postgres://u@h/db?sslmode=verify-full&sslrootcert=" + writeCA(t)},
		"keyword form": {reason: "a keyword/value DSN is read the same way", dsn: "host=h user=u dbname=db sslmode=require",
			want: "sslmode=require"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, CheckTLS(tc.dsn), "accepted: "+tc.reason)
			got, err := Unverified(tc.dsn)
			require.NoError(t, err)
			if tc.want == "" {
				require.Empty(t, got, tc.reason)
				return
			}
			require.Contains(t, got, tc.want, tc.reason)
		})
	}
}

// WarnUnverified logs one warning a database URL whose TLS does not verify
// the server, naming which URL and its mode, with the password redacted.
func TestWarnUnverified_WarnsOnceAURLNamingItsMode(t *testing.T) {
	t.Parallel()
	var buf testlog.Buffer
	log := zerolog.New(&buf)
	WarnUnverified(log, map[string]string{
		"DATABASE_URL":      "postgres://app:hunter2@primary/db?sslmode=require",
		"DATABASE_READ_URL": "postgres://app@replica/db?sslmode=verify-full&sslrootcert=" + writeCA(t),
	})
	lines := buf.Lines()
	require.Len(t, lines, 1, buf.String())
	require.Contains(t, lines[0], `"level":"warn"`)
	require.Contains(t, lines[0], `"variable":"DATABASE_URL"`)
	require.Contains(t, lines[0], "sslmode=require")
	require.Contains(t, lines[0], "verify-full")
	require.NotContains(t, lines[0], "hunter2")
}

// writeCA writes a test CA certificate and returns its path.
func writeCA(t *testing.T) string {
	t.Helper()
	return tlstest.NewCA(t).WriteFile(t, t.TempDir())
}
