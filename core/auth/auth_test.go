package auth

import (
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// API_TOKENS_FILE reloads like the worker plane's files: a change swaps the
// set and closes Changed, Current follows a token's entry (its role too),
// and a file broken mid-rotation keeps the last good set.
func TestTokens_ReloadSwapsAndKeepsTheLastGoodSet(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "api-tokens")
	const a, b = "api-token-aaaaaaaaaaaa", "api-token-bbbbbbbbbbbb"
	writeFile(t, f, a+" admin alice\n"+b+" admin bob\n")
	toks, err := LoadTokens(f, 0, zerolog.Nop())
	require.NoError(t, err)
	bob, ok := toks.Lookup(b)
	require.True(t, ok)
	require.True(t, bob.CanMutate())

	require.NoError(t, toks.Reload())
	changed := toks.Changed()
	select {
	case <-changed:
		t.Fatal("unchanged content is no change")
	default:
	}
	writeFile(t, f, a+" admin alice\n"+b+" viewer bob\n")
	require.NoError(t, toks.Reload())
	select {
	case <-changed:
	default:
		t.Fatal("a change closes Changed")
	}
	cur, ok := toks.Current(bob)
	require.True(t, ok)
	require.False(t, cur.CanMutate(), "a token demoted to viewer runs as one")

	writeFile(t, f, a+" admin alice\n")
	require.NoError(t, toks.Reload())
	_, ok = toks.Current(bob)
	require.False(t, ok, "a removed token is no longer current")
	_, ok = toks.Lookup(b)
	require.False(t, ok, "nor accepted")

	writeFile(t, f, "# emptied mid-rotation\n")
	require.ErrorContains(t, toks.Reload(), "no tokens")
	_, ok = toks.Lookup(a)
	require.True(t, ok, "the last good set stays in use")

	cert := Identity{Role: RoleViewer, Name: "CN=dashboard"}
	cur, ok = toks.Current(cert)
	require.True(t, ok)
	require.Equal(t, cert, cur, "an identity without a token is left as it is")
}
