// Package logging builds the process logger from LOG_FORMAT and LOG_LEVEL.
package logging

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// levels are LOG_LEVEL's values.
var levels = map[string]zerolog.Level{
	"debug": zerolog.DebugLevel, "info": zerolog.InfoLevel, "warn": zerolog.WarnLevel, "error": zerolog.ErrorLevel,
}

// New returns a zerolog logger: format "json" writes one JSON object per line
// (for log shippers), anything else human console output; level is one of
// debug, info, warn, error (default info).
func New(format, level string, w io.Writer) (zerolog.Logger, error) {
	if w == nil {
		w = os.Stderr
	}
	lvl := zerolog.InfoLevel
	if level != "" {
		// Only the documented levels: zerolog also parses disabled, fatal,
		// panic and numbers, which would silence the errors and the outage
		// reports an operator relies on.
		l, ok := levels[strings.ToLower(level)]
		if !ok {
			return zerolog.Nop(), fmt.Errorf("LOG_LEVEL %q: want debug, info, warn or error", level)
		}
		lvl = l
	}
	switch strings.ToLower(format) {
	case "json":
	case "", "text", "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	default:
		return zerolog.Nop(), fmt.Errorf("LOG_FORMAT %q: want json or text", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// FromEnv is New with LOG_FORMAT and LOG_LEVEL.
func FromEnv() (zerolog.Logger, error) {
	return New(os.Getenv("LOG_FORMAT"), os.Getenv("LOG_LEVEL"), os.Stderr)
}
