package apptest

import (
	"os"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/testlog"
)

// Logger routes zerolog output to t.Log (shown for failing tests and with
// -v) at CONVERGE_TEST_LOG's level (debug, info, warn, error; default info).
// Lines written after the test ended are dropped: t.Log then panics.
func Logger(t testing.TB) zerolog.Logger {
	out := zerolog.ConsoleWriter{Out: testlog.Writer(t), NoColor: true, TimeFormat: "15:04:05.000"}
	return zerolog.New(out).Level(Level()).With().Timestamp().Logger()
}

// StderrLogger writes to stderr at CONVERGE_TEST_LOG's level when it is set,
// else discards; for helper processes, which have no test to log to.
func StderrLogger() zerolog.Logger {
	if os.Getenv("CONVERGE_TEST_LOG") == "" {
		return zerolog.Nop()
	}
	return zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(Level()).With().Timestamp().Logger()
}

// Level is CONVERGE_TEST_LOG's level (default info).
func Level() zerolog.Level {
	if l, err := zerolog.ParseLevel(strings.ToLower(os.Getenv("CONVERGE_TEST_LOG"))); err == nil && l != zerolog.NoLevel {
		return l
	}
	return zerolog.InfoLevel
}
