package auth

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

const (
	tokA = "worker-token-aaaaaaaaaaaa"
	tokB = "worker-token-bbbbbbbbbbbb"
	tokM = "mesh-token-mmmmmmmmmmmmmm"
	tokN = "mesh-token-nnnnnnnnnnnnnn"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
}

// The files parse into identities with audiences and kinds, a rotation is
// picked up by content, and a file broken mid-rotation keeps the last good
// set.
func TestPlane_LoadsRotatesAndKeepsTheLastGoodSet(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	wf, mf := filepath.Join(dir, "workers"), filepath.Join(dir, "mesh")
	writeFile(t, wf, "# workers\n"+tokA+" ingest\n"+tokB+" sink statussink,logsink\n")
	writeFile(t, mf, tokM+" mesh-1\n"+tokN+" mesh-0\n")
	p, err := NewPlane(wf, mf, 0, zerolog.Nop())
	require.NoError(t, err)

	a, ok := p.Lookup(tokA)
	require.True(t, ok)
	require.Equal(t, Principal{Name: "ingest", Audience: AudienceWorker, Via: "token", digest: a.digest}, a)
	require.True(t, a.Serves("anything"), "a token without kinds serves every kind")
	b, _ := p.Lookup(tokB)
	require.True(t, b.Serves("statussink"))
	require.False(t, b.Serves("vpc"), "a kind-restricted token serves only its kinds")
	m, ok := p.Lookup(tokM)
	require.True(t, ok)
	require.True(t, m.Is(AudienceBroker))
	require.False(t, m.Is(AudienceWorker), "a mesh token is not a worker's")
	require.Equal(t, tokM, p.MeshToken(), "the first mesh token is presented")
	require.Equal(t, []string{tokM, tokN}, p.MeshTokens())
	_, ok = p.Lookup("unknown-token-xxxxxxxxx")
	require.False(t, ok)

	require.NoError(t, p.Reload())
	require.Zero(t, p.Swaps(), "unchanged content is no swap")
	writeFile(t, mf, tokN+" mesh-0\n")
	require.NoError(t, p.Reload())
	require.Equal(t, int64(1), p.Swaps())
	require.Equal(t, tokN, p.MeshToken(), "the rotation applies")
	_, ok = p.Lookup(tokM)
	require.False(t, ok, "a removed token is refused")

	changed := p.Changed()
	cur, ok := p.Current(b)
	require.True(t, ok)
	require.Equal(t, b, cur, "a listed token is current")
	writeFile(t, wf, tokA+" ingest\n"+tokB+" sink logsink\n")
	require.NoError(t, p.Reload())
	select {
	case <-changed:
	default:
		t.Fatal("a swap closes Changed")
	}
	cur, ok = p.Current(b)
	require.True(t, ok)
	require.False(t, cur.Serves("statussink"), "Current is the token's entry as last read")
	writeFile(t, wf, tokA+" ingest\n")
	require.NoError(t, p.Reload())
	_, ok = p.Current(b)
	require.False(t, ok, "a removed token is no longer current")
	cert := Principal{Name: "w", Audience: AudienceWorker, Via: "certificate"}
	cur, ok = p.Current(cert)
	require.True(t, ok)
	require.Equal(t, cert, cur, "a certificate's principal is left as it is")

	writeFile(t, wf, "half-writ")
	require.Error(t, p.Reload(), "a broken file is reported")
	_, ok = p.Lookup(tokA)
	require.True(t, ok, "the last good set stays in use")
}

func TestPlane_RefusesBadFiles(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ content, want string }{
		"short":     {content: "short ingest\n", want: "at least 16"},
		"empty":     {content: "# nothing\n", want: "no tokens"},
		"fields":    {content: tokA + "\n", want: "want <token> <name>"},
		"duplicate": {content: tokA + " a\n" + tokA + " b\n", want: "duplicate"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := filepath.Join(t.TempDir(), "workers")
			writeFile(t, f, tc.content)
			_, err := NewPlane(f, "", 0, zerolog.Nop())
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "WORKER_TOKENS_FILE")
		})
	}
}
