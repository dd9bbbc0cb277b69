package auth

import (
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// A token listed for two audiences — the API's and the worker plane's, or
// the workers' and the peer brokers' — is refused when the second file
// loads, naming both files and the lines, never the token: one credential
// would otherwise authenticate both (a worker token reading the API, a
// dashboard token running tasks). Both loaders used to accept it.
func TestTokenFiles_OneTokenIsRefusedForTwoAudiences(t *testing.T) {
	t.Parallel()
	const shared = "shared-token-ssssssssssss"
	for name, tc := range map[string]struct {
		reason          string
		api, work, mesh string // file contents ("" = unset)
		want, wantFile  string // the refused file's setting, the other's
		load            func(api, work, mesh string) error
	}{
		"api and workers": {
			reason: "the API refuses a worker's token",
			api:    tokA + " admin alice\n" + shared + " viewer dash\n", work: tokB + " ingest\n" + shared + " sink\n",
			want: "API_TOKENS_FILE", wantFile: "WORKER_TOKENS_FILE",
			load: loadAPI,
		},
		"api and mesh": {
			reason: "the API refuses a peer broker's token",
			api:    tokA + " admin alice\n" + shared + " admin bob\n", mesh: shared + " mesh-1\n",
			want: "API_TOKENS_FILE", wantFile: "MESH_TOKENS_FILE",
			load: loadAPI,
		},
		"workers and api": {
			reason: "the worker plane refuses an API token",
			api:    shared + " admin alice\n", work: tokA + " ingest\n" + shared + " sink\n",
			want: "WORKER_TOKENS_FILE", wantFile: "API_TOKENS_FILE",
			load: loadPlane,
		},
		"mesh and api": {
			reason: "the mesh refuses an API token",
			api:    shared + " admin alice\n", mesh: tokM + " mesh-1\n" + shared + " mesh-0\n",
			want: "MESH_TOKENS_FILE", wantFile: "API_TOKENS_FILE",
			load: loadPlane,
		},
		"mesh and workers": {
			reason: "a worker's token is no peer broker's",
			work:   tokA + " ingest\n" + shared + " sink\n", mesh: tokM + " mesh-1\n" + shared + " mesh-0\n",
			want: "MESH_TOKENS_FILE", wantFile: "WORKER_TOKENS_FILE",
			load: loadPlane,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			api, work, mesh := tokenFiles(t, tc.api, tc.work, tc.mesh)
			err := tc.load(api, work, mesh)
			require.Error(t, err, tc.reason)
			paths := map[string]string{"API_TOKENS_FILE": api, "WORKER_TOKENS_FILE": work, "MESH_TOKENS_FILE": mesh}
			require.ErrorContains(t, err, tc.want+" "+paths[tc.want]+": line 2: the token is also in "+
				tc.wantFile+" "+paths[tc.wantFile]+" (line ", tc.reason)
			require.NotContains(t, err.Error(), shared, "the token is never printed")
		})
	}
}

// tokenFiles writes the non-empty contents to files of a test directory
// and returns their paths ("" for an empty content).
func tokenFiles(t *testing.T, contents ...string) (string, string, string) {
	t.Helper()
	dir := t.TempDir()
	paths := make([]string, 3)
	for i, c := range contents {
		if c != "" {
			paths[i] = filepath.Join(dir, []string{"api", "workers", "mesh"}[i])
			writeFile(t, paths[i], c)
		}
	}
	return paths[0], paths[1], paths[2]
}

func loadAPI(api, work, mesh string) error {
	_, err := LoadTokens(api, 0, zerolog.Nop(), TokenFile{Setting: "WORKER_TOKENS_FILE", Path: work},
		TokenFile{Setting: "MESH_TOKENS_FILE", Path: mesh})
	return err
}

func loadPlane(api, work, mesh string) error {
	_, err := NewPlane(work, mesh, 0, zerolog.Nop(), TokenFile{Setting: "API_TOKENS_FILE", Path: api})
	return err
}

// A reload that would make a token serve two audiences is refused like a
// broken file: the last good set stays in use, and the other audience's
// file is read again at every reload, so a token added there is caught by
// either side's next reload.
func TestTokenFiles_ReloadRefusesATokenOfTwoAudiences(t *testing.T) {
	t.Parallel()
	const apiTok = "api-token-aaaaaaaaaaaa"
	api, work, _ := tokenFiles(t, apiTok+" admin alice\n", tokA+" ingest\n", "")
	toks, err := LoadTokens(api, 0, zerolog.Nop(), TokenFile{Setting: "WORKER_TOKENS_FILE", Path: work})
	require.NoError(t, err)
	plane, err := NewPlane(work, "", 0, zerolog.Nop(), TokenFile{Setting: "API_TOKENS_FILE", Path: api})
	require.NoError(t, err)

	writeFile(t, work, tokA+" ingest\n"+apiTok+" sink\n") // the API's token added to the workers'
	err = plane.Reload()
	require.ErrorContains(t, err, "WORKER_TOKENS_FILE "+work+": line 2: the token is also in API_TOKENS_FILE "+api+" (line 1)")
	require.NotContains(t, err.Error(), apiTok)
	_, ok := plane.Lookup(apiTok)
	require.False(t, ok, "the worker plane keeps its last good set")
	_, ok = plane.Lookup(tokA)
	require.True(t, ok)
	require.Zero(t, plane.Swaps())

	require.ErrorContains(t, toks.Reload(), "API_TOKENS_FILE "+api+": line 1: the token is also in WORKER_TOKENS_FILE "+work+" (line 2)",
		"the API's reload reports it too")
	id, ok := toks.Lookup(apiTok)
	require.True(t, ok, "and keeps its last good set")
	require.Equal(t, "alice", id.Name)

	writeFile(t, work, tokA+" ingest\n")
	require.NoError(t, plane.Reload())
	require.NoError(t, toks.Reload())
}
