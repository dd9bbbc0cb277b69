package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMigrate_RefusesWhatServeRefuses: `converge migrate` reads DATABASE_URL
// and DB_IAM_AUTH as serve does, and a value serve refuses is refused here
// too, naming the variable, before it connects (DB_IAM_AUTH=yes was read as
// false, and the run went on without IAM tokens).
func TestMigrate_RefusesWhatServeRefuses(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason  string
		env     map[string]string
		wantErr string
	}{
		"no database": {reason: "DATABASE_URL is required", env: map[string]string{},
			wantErr: "DATABASE_URL is not set"},
		"iam yes": {reason: "DB_IAM_AUTH is a boolean, as serve reads it",
			env:     map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/converge?sslmode=require", "DB_IAM_AUTH": "yes"},
			wantErr: `DB_IAM_AUTH="yes": want true or false`},
		"iam without tls": {reason: "IAM tokens need TLS",
			env:     map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/converge?sslmode=disable", "DB_IAM_AUTH": "true"},
			wantErr: "DB_IAM_AUTH needs TLS"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, sub := range []string{"up", "down", "status"} {
				cmd := migrateCmd(func(k string) string { return tc.env[k] })
				cmd.SetArgs([]string{sub})
				cmd.SetOut(&bytes.Buffer{})
				cmd.SetErr(&bytes.Buffer{})
				cmd.SilenceUsage, cmd.SilenceErrors = true, true
				require.ErrorContains(t, cmd.Execute(), tc.wantErr, "migrate %s: %s", sub, tc.reason)
			}
		})
	}
}

// TestCommands_RefuseWhatTheyDoNotTake: a mistyped or missing migrate
// subcommand and stray arguments fail (a Job running `converge migrate upp`
// printed the help and exited 0, having migrated nothing; `converge serve
// foo` served, ignoring foo). Each fails before reading the environment.
func TestCommands_RefuseWhatTheyDoNotTake(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason  string
		args    []string
		wantErr string
	}{
		"mistyped subcommand": {reason: "a typo must not pass for a migration", args: []string{"migrate", "upp"},
			wantErr: `unknown migrate command "upp": want up, down or status`},
		"no subcommand": {reason: "migrate alone does nothing", args: []string{"migrate"},
			wantErr: "migrate needs a command: up, down or status"},
		"stray argument to migrate up": {reason: "up takes no arguments", args: []string{"migrate", "up", "extra"},
			wantErr: `unknown command "extra" for "converge migrate up"`},
		"stray argument to serve": {reason: "serve is configured by the environment only", args: []string{"serve", "foo"},
			wantErr: `unknown command "foo" for "converge serve"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := rootCmd()
			cmd.SetArgs(tc.args)
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			require.ErrorContains(t, cmd.Execute(), tc.wantErr, tc.reason)
		})
	}
}

// TestServe_ReportsEveryRefusalAtOnce: the server's configuration, the log
// settings and the API limits are refused together, each naming its
// variable, so an operator fixes them in one round (they came one per
// restart: the configuration's, then the log's, then the limits').
func TestServe_ReportsEveryRefusalAtOnce(t *testing.T) {
	t.Parallel()
	env := map[string]string{"LOG_LEVEL": "verbose", "API_MAX_DEPTH": "0"}
	err := serveMain(context.Background(), func(k string) string { return env[k] })
	for _, want := range []string{"DATABASE_URL is required", `LOG_LEVEL "verbose"`, "API_MAX_DEPTH"} {
		require.ErrorContains(t, err, want)
	}
}

// TestHelperProcess is not a test: TestMigrate_WarnsAsServeDoes re-executes
// the test binary with CONVERGE_HELPER_ARGS set, to run converge with those
// arguments in an environment the test chose.
func TestHelperProcess(t *testing.T) {
	args := os.Getenv("CONVERGE_HELPER_ARGS")
	if args == "" {
		t.Skip("helper process; runs only when re-executed by the tests")
	}
	cmd := rootCmd()
	cmd.SetArgs(strings.Fields(args))
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "converge:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestMigrate_WarnsAsServeDoes: `converge migrate` with DB_IAM_AUTH warns,
// as serve's boot does, for a database URL whose TLS does not verify the
// server (the IAM token can reach an impersonator), and is silent for
// sslmode=verify-full; it said nothing. The AWS environment is empty, so
// each run then stops at the missing region, before it connects.
func TestMigrate_WarnsAsServeDoes(t *testing.T) {
	t.Parallel()
	const warning = "DB_IAM_AUTH over TLS that does not verify the database server"
	cases := map[string]struct {
		reason string
		url    string
		want   string // "" when no warning
	}{
		"require": {reason: "sslmode=require checks no certificate",
			url: "postgres://127.0.0.1:1/converge?sslmode=require", want: "sslmode=require checks no certificate"},
		"verify-ca": {reason: "verify-ca does not check the host name",
			url: "postgres://127.0.0.1:1/converge?sslmode=verify-ca", want: "sslmode=verify-ca checks the certificate"},
		"verify-full": {reason: "verify-full verifies the server", url: "postgres://127.0.0.1:1/converge?sslmode=verify-full"},
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	for name, tc := range cases {
		for _, sub := range []string{"up", "down", "status"} {
			t.Run(name+"/"+sub, func(t *testing.T) {
				t.Parallel()
				home := t.TempDir()
				cmd := exec.Command(exe, "-test.run", "^TestHelperProcess$")
				cmd.Env = []string{
					"CONVERGE_HELPER_ARGS=migrate " + sub, "HOME=" + home, "LOG_FORMAT=json",
					"DATABASE_URL=" + tc.url, "DB_IAM_AUTH=true",
					"AWS_CONFIG_FILE=" + filepath.Join(home, "none"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(home, "none"),
					"AWS_EC2_METADATA_DISABLED=true",
				}
				var stderr strings.Builder
				cmd.Stderr = &stderr
				err := cmd.Run()
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit, "stderr: %s", stderr.String())
				require.Equal(t, 1, exit.ExitCode(), "stderr: %s", stderr.String())
				require.Contains(t, stderr.String(), "DB_IAM_AUTH: no AWS region", "it went as far as the AWS configuration")
				if tc.want == "" {
					require.NotContains(t, stderr.String(), warning, tc.reason)
					return
				}
				require.Contains(t, stderr.String(), warning, tc.reason)
				require.Contains(t, stderr.String(), `"variable":"DATABASE_URL"`)
				require.Contains(t, stderr.String(), tc.want)
				require.Contains(t, stderr.String(), `"level":"warn"`)
			})
		}
	}
}
