package cli_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/cli"
)

// Every name of a delete is checked before the first is deleted: a bad one
// is a usage error with nothing deleted. The provider configs were deleted
// one by one as each name was read, so the good names before a bad one were
// gone when the command was refused.
func TestDelete_RefusesABadNameBeforeDeletingAny(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{noWorker: true})
	must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, "account.kind.json"),
		"-f", filepath.Join(classicFixtures, "providerconfig-account.json")))
	r := s.conctl("delete", "pc", "account/default", "nokind")
	require.Contains(t, r.stderr, `"nokind": want KIND/NAME (or NAME with --kind)`)
	require.Empty(t, r.stdout, "nothing deleted, nothing reported")
	must(t, s.conctl("get", "pc", "account/default"))
	require.Equal(t, cli.ExitUsage, r.code, r.stderr)
}
