package pgcluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

func TestFindBinaries_MissingNamesThePackage(t *testing.T) {
	t.Parallel()
	empty := t.TempDir()
	_, err := findBinariesIn([]string{empty}, filepath.Join(empty, "nope"))
	require.ErrorIs(t, err, ErrBinariesNotFound)
	require.Contains(t, err.Error(), "apt-get install postgresql")
}

func TestFindBinaries_FallsBackToNewestDebianDir(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, v := range []string{"13", "16"} {
		dir := filepath.Join(root, v, "bin")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for _, b := range []string{"initdb", "postgres"} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\n"), 0o755))
		}
	}
	b, err := findBinariesIn(nil, root)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, "16", "bin", "postgres"), b.Postgres)
}

func query1(t *testing.T, url string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
	return one
}

func TestStart_TempClusterServesTCPAndSocketAndIsRemovedOnStop(t *testing.T) {
	t.Parallel()
	c, err := Start(context.Background(), Options{Fast: true, Logger: zerolog.Nop()})
	require.NoError(t, err)
	require.Equal(t, 1, query1(t, c.URL("postgres")))
	require.Equal(t, 1, query1(t, c.SocketURL("postgres")))
	dir := c.DataDir()
	require.DirExists(t, dir)

	require.NoError(t, c.Stop())
	require.NoError(t, c.Stop(), "stop is idempotent")
	require.NoDirExists(t, dir, "temporary data is removed")
	_, err = pgx.Connect(context.Background(), c.URL("postgres"))
	require.Error(t, err, "server is gone")
}

func TestStart_DataDirSurvivesRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := t.TempDir()
	dataDir := filepath.Join(base, "pgdata")
	c, err := Start(ctx, Options{DataDir: dataDir, Fast: true, Logger: zerolog.Nop()})
	require.NoError(t, err)
	require.NoError(t, c.CreateDatabase(ctx, "keepme"))
	conn, err := pgx.Connect(ctx, c.URL("keepme"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE marker (v int); INSERT INTO marker VALUES (42)")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	require.NoError(t, c.Stop())
	require.DirExists(t, dataDir, "a given data dir is kept")

	c2, err := Start(ctx, Options{DataDir: dataDir, Fast: true, Logger: zerolog.Nop()})
	require.NoError(t, err)
	defer func() { require.NoError(t, c2.Stop()) }()
	require.NoError(t, c2.CreateDatabase(ctx, "keepme"), "creating an existing database is a no-op")
	conn, err = pgx.Connect(ctx, c2.URL("keepme"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var v int
	require.NoError(t, conn.QueryRow(ctx, "SELECT v FROM marker").Scan(&v))
	require.Equal(t, 42, v)
}

func TestSweepStaleTempDirs_RemovesDirsOfDeadOwners(t *testing.T) {
	t.Parallel()
	// A process that has exited: its pid is dead.
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	deadPid := cmd.Process.Pid

	// The sweep scans os.TempDir() for its own prefix, so t.TempDir() won't do.
	stale, err := os.MkdirTemp("", tempPrefix) //nolint:usetesting // see above
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(stale, "owner.pid"), []byte(strconv.Itoa(deadPid)), 0o644))
	live, err := os.MkdirTemp("", tempPrefix) //nolint:usetesting // see above
	require.NoError(t, err)
	defer os.RemoveAll(live)
	require.NoError(t, os.WriteFile(filepath.Join(live, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644))

	sweepStaleTempDirs(zerolog.Nop())
	require.NoDirExists(t, stale)
	require.DirExists(t, live, "a live owner's cluster is left alone")
}

func TestStart_ServerDiesWithItsOwner(t *testing.T) {
	t.Parallel()
	// Run a child test binary that starts a cluster and then is SIGKILLed:
	// PDEATHSIG must take the server down with it.
	exe, err := os.Executable()
	require.NoError(t, err)
	portFile := filepath.Join(t.TempDir(), "port")
	cmd := exec.Command(exe, "-test.run", "^TestHelperStartAndHang$")
	cmd.Env = append(os.Environ(), "PGCLUSTER_HELPER=1", "PGCLUSTER_PORT_FILE="+portFile)
	require.NoError(t, cmd.Start())
	deadline := time.Now().Add(60 * time.Second)
	var port string
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(portFile); err == nil && len(b) > 0 {
			port = string(b)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.NotEmpty(t, port, "helper started a cluster")
	url := "postgres://postgres@127.0.0.1:" + port + "/postgres?sslmode=disable"
	require.Equal(t, 1, query1(t, url))
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	for {
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			return // server gone
		}
		_ = conn.Close(context.Background())
		if time.Now().After(deadline) {
			t.Fatal("postgres outlived its killed owner")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHelperStartAndHang is the child process of TestStart_ServerDiesWithItsOwner.
func TestHelperStartAndHang(t *testing.T) {
	if os.Getenv("PGCLUSTER_HELPER") != "1" {
		t.Skip("only runs as the helper process of TestStart_ServerDiesWithItsOwner")
	}
	c, err := Start(context.Background(), Options{Fast: true, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(os.Getenv("PGCLUSTER_PORT_FILE"), []byte(strconv.Itoa(c.Port())), 0o644); err != nil {
		t.Fatal(err)
	}
	select {} // wait to be killed
}

// TestStart_PortTakenByAnotherServerIsRefused: a cluster asked for a port
// another Postgres already serves (a second devstack with the same
// --pg-port) fails to start, naming the port; it never takes the other
// server's answer for its own and hands out a URL to the other's databases.
func TestStart_PortTakenByAnotherServerIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	first, err := Start(ctx, Options{Fast: true, Logger: zerolog.Nop()})
	require.NoError(t, err)
	defer func() { require.NoError(t, first.Stop()) }()
	require.NoError(t, first.CreateDatabase(ctx, "only_on_the_first"))

	second, err := Start(ctx, Options{Fast: true, Port: first.Port(), Logger: zerolog.Nop()})
	if err == nil {
		conn, cerr := pgx.Connect(ctx, second.URL("postgres"))
		var sees bool
		if cerr == nil {
			_ = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'only_on_the_first')").Scan(&sees)
			_ = conn.Close(ctx)
		}
		_ = second.Stop()
		t.Fatalf("the second cluster started on the first's port %d (its URL reaches the first's databases: %v)", first.Port(), sees)
	}
	require.ErrorContains(t, err, "port "+strconv.Itoa(first.Port()))
}
