package functions_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/functions"
)

// TestLedger_MatchesFiles fails when a function file changed without a new
// ledger line: the embedded set must be exactly what its version says.
func TestLedger_MatchesFiles(t *testing.T) {
	t.Parallel()
	s, err := functions.Embedded()
	require.NoError(t, err)
	if s.Checksum != s.LedgerChecksum {
		t.Fatalf("db/functions changed but db/functions/VERSION still records %s for version %d.\n"+
			"Append this line to db/functions/VERSION (never edit an existing one):\n\n%d %s\n",
			s.LedgerChecksum, s.Version, s.Version+1, s.Checksum)
	}
}

var createRe = regexp.MustCompile(`(?m)^CREATE OR REPLACE FUNCTION (\w+)\(`)

// TestFiles_OneFunctionPerFileWithComment: each file defines exactly the
// function it is named for, and opens with its comment block.
func TestFiles_OneFunctionPerFileWithComment(t *testing.T) {
	t.Parallel()
	s, err := functions.Embedded()
	require.NoError(t, err)
	require.NotEmpty(t, s.Files)
	for _, f := range s.Files {
		m := createRe.FindAllStringSubmatch(f.SQL, -1)
		require.Len(t, m, 1, "%s: exactly one CREATE OR REPLACE FUNCTION", f.Name)
		require.Equal(t, strings.TrimSuffix(f.Name, ".sql"), m[0][1], "%s: named for its function", f.Name)
		require.True(t, strings.HasPrefix(f.SQL, "-- "), "%s: starts with its comment block", f.Name)
		require.NotContains(t, f.SQL, "+goose", "%s: a function file is not a migration", f.Name)
	}
}

func TestParseLedger(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		text   string
		want   []functions.LedgerEntry
		err    string
	}{
		"Ok": {
			reason: "comments and blank lines are skipped, versions count up",
			text:   "# ledger\n\n1 sha256:aa\n2 sha256:bb\n",
			want:   []functions.LedgerEntry{{Version: 1, Checksum: "sha256:aa"}, {Version: 2, Checksum: "sha256:bb"}},
		},
		"Gap": {
			reason: "a skipped version is refused",
			text:   "1 sha256:aa\n3 sha256:bb\n",
			err:    "want 2",
		},
		"Empty": {
			reason: "a ledger needs a version",
			text:   "# nothing\n",
			err:    "empty",
		},
		"Malformed": {
			reason: "a line is a version and a checksum",
			text:   "1 aa\n",
			err:    "want",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := functions.ParseLedger(tc.text)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err, tc.reason)
				return
			}
			require.NoError(t, err, tc.reason)
			require.Equal(t, tc.want, got, tc.reason)
		})
	}
}

func TestLoad_ChecksumFollowsContent(t *testing.T) {
	t.Parallel()
	body := func(n int) []byte {
		return fmt.Appendf(nil, "-- a\nCREATE OR REPLACE FUNCTION a() RETURNS int LANGUAGE sql AS $$ SELECT %d $$;\n", n)
	}
	fsys := fstest.MapFS{
		"a.sql":   {Data: body(1)},
		"VERSION": {Data: []byte("1 sha256:x\n")},
	}
	s1, err := functions.Load(fsys)
	require.NoError(t, err)
	require.EqualValues(t, 1, s1.Version)
	fsys["a.sql"] = &fstest.MapFile{Data: body(2)}
	s2, err := functions.Load(fsys)
	require.NoError(t, err)
	require.NotEqual(t, s1.Checksum, s2.Checksum, "a changed body changes the checksum")
}
