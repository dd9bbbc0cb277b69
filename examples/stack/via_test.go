package stack

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// A member's database URL goes through Options.Via: same user, database and
// parameters, the host:port Via returns; a failing Via names the member.
func TestDatabaseURLFor_GoesThroughVia(t *testing.T) {
	t.Parallel()
	s := &Stack{DatabaseURL: "postgres://postgres@127.0.0.1:5432/converge?sslmode=disable"}
	got, err := s.databaseURLFor("broker-1")
	require.NoError(t, err)
	require.Equal(t, s.DatabaseURL, got, "without Via, the database itself")

	var asked []string
	s.opts.Via = func(member, target string) (string, error) {
		asked = append(asked, member+"->"+target)
		return "127.0.0.1:6000", nil
	}
	got, err = s.databaseURLFor("broker-1")
	require.NoError(t, err)
	require.Equal(t, "postgres://postgres@127.0.0.1:6000/converge?sslmode=disable", got)
	require.Equal(t, []string{"broker-1->127.0.0.1:5432"}, asked)

	s.opts.Via = func(string, string) (string, error) { return "", errors.New("no free port") }
	_, err = s.databaseURLFor("control-2")
	require.ErrorContains(t, err, "control-2's route to postgres: no free port")
}

// RestartPostgres refuses a temporary data directory, which would not
// survive the stop, before it touches the server.
func TestRestartPostgres_NeedsADataDir(t *testing.T) {
	t.Parallel()
	err := (&Stack{}).RestartPostgres(t.Context(), false)
	require.ErrorContains(t, err, "Options.DataDir")
}
