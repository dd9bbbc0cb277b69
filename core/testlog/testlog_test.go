package testlog

import (
	"io"
	"slices"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// recorder is the part of testing.TB the writer uses: Log and Cleanup.
type recorder struct {
	testing.TB // nil: any other method panics
	logs       []string
	cleanups   []func()
}

func (r *recorder) Log(args ...any) {
	for _, a := range args {
		r.logs = append(r.logs, a.(string))
	}
}

func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

// A line written while the test runs reaches its log, without its newline;
// one written after the test's cleanups ran is dropped (t.Log would panic
// then, or race with the test's end) and still reported written.
func TestWriter_DropsLinesAfterTheTestEnded(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	w := Writer(r)
	n, err := io.WriteString(w, "during the test\n")
	require.NoError(t, err)
	require.Equal(t, len("during the test\n"), n)
	for _, f := range slices.Backward(r.cleanups) {
		f()
	}
	n, err = io.WriteString(w, "after the test\n")
	require.NoError(t, err)
	require.Equal(t, len("after the test\n"), n, "reported written, so the logger does not complain")
	require.Equal(t, []string{"during the test"}, r.logs, "the line after the cleanups is dropped")
}

func TestBuffer_CountMessageMatchesWholeMessagesOnly(t *testing.T) {
	t.Parallel()
	var b Buffer
	log := zerolog.New(&b)
	log.Error().Msg("claim failed; retried quietly until it claims again")
	require.Equal(t, 1, b.Count("claims again"), "Count finds it inside the other message")
	require.Zero(t, b.CountMessage("pair claims again"))
	log.Info().Str("kind", "subnet/v1").Msg("pair claims again")
	require.Equal(t, 1, b.CountMessage("pair claims again"))
	require.Equal(t, 1, b.CountMessage("claim failed; retried quietly until it claims again"))
	_, err := io.WriteString(&b, "not json, pair claims again\n")
	require.NoError(t, err)
	require.Equal(t, 1, b.CountMessage("pair claims again"), "a line that is not JSON has no message")
}
