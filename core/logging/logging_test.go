package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNew_FormatsAndLevels(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason, format, level string
		wantErr               bool
		wantJSON              bool
		debugShown            bool
	}{
		"json":          {reason: "json emits one object per line", format: "json", wantJSON: true},
		"text default":  {reason: "empty format is human console output"},
		"debug level":   {reason: "debug level shows debug lines", format: "json", level: "debug", wantJSON: true, debugShown: true},
		"bad level":     {reason: "an unknown level is a clear error", level: "loud", wantErr: true},
		"bad format":    {reason: "an unknown format is a clear error", format: "xml", wantErr: true},
		"level is case": {reason: "levels are case-insensitive", format: "json", level: "WARN", wantJSON: true},
		"disabled":      {reason: "zerolog's disabled would silence every line, errors too: not a documented level", level: "disabled", wantErr: true},
		"fatal":         {reason: "fatal would hide every error: not a documented level", level: "fatal", wantErr: true},
		"number":        {reason: "zerolog's numeric levels are not documented ones", level: "-1", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			log, err := New(tc.format, tc.level, &buf)
			if tc.wantErr {
				require.Error(t, err, tc.reason)
				return
			}
			require.NoError(t, err, tc.reason)
			log.Debug().Msg("dbg")
			log.Warn().Str("kind", "vpc").Msg("hello")
			out := buf.String()
			require.Equal(t, tc.debugShown, strings.Contains(out, "dbg"), tc.reason)
			require.Contains(t, out, "hello", tc.reason)
			if tc.wantJSON {
				lines := strings.Split(strings.TrimSpace(out), "\n")
				var m map[string]any
				require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &m), tc.reason)
				require.Equal(t, "vpc", m["kind"], tc.reason)
			}
		})
	}
}
