package api

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// documentedDefaults reads the table rows of a document's section that
// name API_* variables: `NAME` (or `A`, `B`) | default | … → name →
// default, the defaults split like the names.
func documentedDefaults(t *testing.T, doc, section string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(doc)
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(b), "\n"+section+"\n")
	require.True(t, ok, "%s has a %q section", doc, section)
	if end := strings.Index(rest, "\n## "); end >= 0 {
		rest = rest[:end]
	}
	row := regexp.MustCompile("(?m)^\\| ((?:`API_[A-Z_]+`(?:, )?)+) \\| ([^|]*) \\|")
	got := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(rest, -1) {
		names := strings.Split(m[1], ", ")
		defaults := strings.Split(strings.TrimSpace(m[2]), ", ")
		require.Len(t, defaults, len(names), "%s: one default per name in %q", doc, m[0])
		for i, n := range names {
			got[strings.Trim(n, "`")] = strings.Trim(defaults[i], "`")
		}
	}
	return got
}

// TestLimits_DocumentedAsServed: every API_* variable LimitsFromEnv reads is
// in the limits tables of docs/graphql.md and docs/operations.md, and the
// default each table gives is the one served — set to it, the variable
// changes nothing.
func TestLimits_DocumentedAsServed(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("limits.go")
	require.NoError(t, err)
	var read []string
	for _, m := range regexp.MustCompile(`"(API_[A-Z_]+)"`).FindAllStringSubmatch(string(src), -1) {
		read = append(read, m[1])
	}
	require.Contains(t, read, "API_MAX_COMPLEXITY", "the variables are found in limits.go")
	served := Limits{}.withDefaults()
	for doc, section := range map[string]string{
		"../../docs/graphql.md":    "## Limits",
		"../../docs/operations.md": "## Configuration",
	} {
		documented := documentedDefaults(t, doc, section)
		for _, name := range read {
			def, ok := documented[name]
			if !ok {
				t.Errorf("%s's %s does not list %s", doc, section, name)
				continue
			}
			if def == "—" || def == "(none)" {
				def = ""
			}
			l, err := LimitsFromEnv(func(n string) string {
				if n == name {
					return def
				}
				return ""
			})
			if err != nil {
				t.Errorf("%s gives %s the default %q, which converge refuses: %v", doc, name, def, err)
				continue
			}
			if diff := cmp.Diff(served, l.withDefaults()); diff != "" {
				t.Errorf("%s gives %s the default %q, which is not the one served (-served +documented):\n%s", doc, name, def, diff)
			}
		}
	}
}
