package config

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// TestDefaults_DocumentedAsParsed: every default docs/operations.md's
// Configuration table gives a variable Parse reads is the default Parse
// keeps — set to the documented value, the variable changes nothing — so
// a default changed in one place only fails here.
func TestDefaults_DocumentedAsParsed(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## Configuration\n")
	require.True(t, ok, "operations.md has a Configuration section")
	section, _, _ = strings.Cut(section, "\n## ")
	src, err := os.ReadFile("config.go")
	require.NoError(t, err)

	// Not values Parse keeps: a required or derived setting, none, and the
	// log settings, which core/logging reads (text and info are its
	// defaults for anything but json and a level).
	notAValue := map[string]bool{"required": true, "—": true, "derived": true}
	readElsewhere := map[string]bool{"LOG_FORMAT": true, "LOG_LEVEL": true}
	base := map[string]string{"DATABASE_URL": "postgres://localhost/converge", "API_AUTH": "none", "WORKER_AUTH": "none"}
	getenv := func(set map[string]string) func(string) string {
		return func(n string) string {
			if v, ok := set[n]; ok {
				return v
			}
			return base[n]
		}
	}
	want, err := Parse(getenv(nil), "test")
	require.NoError(t, err)

	row := regexp.MustCompile("(?m)^\\| ((?:`[A-Z][A-Z0-9_]+`(?:, )?)+) \\| ([^|]*) \\|")
	checked := 0
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		names := strings.Split(m[1], ", ")
		defaults := strings.Split(strings.TrimSpace(m[2]), ", ")
		for i, n := range names {
			name := strings.Trim(n, "`")
			if !strings.Contains(string(src), `"`+name+`"`) || readElsewhere[name] {
				continue // not Parse's (the API limits are core/api's)
			}
			def := strings.Trim(defaults[min(i, len(defaults)-1)], "`")
			if notAValue[def] {
				continue
			}
			checked++
			got, err := Parse(getenv(map[string]string{name: def}), "test")
			if err != nil {
				t.Errorf("operations.md gives %s the default %q, which Parse refuses: %v", name, def, err)
				continue
			}
			if diff := cmp.Diff(want.Redacted(), got.Redacted()); diff != "" {
				t.Errorf("operations.md gives %s the default %q, which is not Parse's (-parsed +documented):\n%s", name, def, diff)
			}
		}
	}
	require.Greater(t, checked, 15, "the table's defaults are found")
}
