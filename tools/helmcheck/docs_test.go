package main

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// configurationSection is docs/operations.md's "## Configuration" section:
// the operator's list of what converge reads.
func configurationSection(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(srcRoot, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Configuration\n")
	if start < 0 {
		t.Fatal("docs/operations.md has no ## Configuration section")
	}
	rest := doc[start+1:]
	if end := strings.Index(rest[3:], "\n## "); end >= 0 {
		rest = rest[:end+3]
	}
	return rest
}

// TestConfigurationDocumentsEveryVariable: every variable the converge
// binary reads (found in its sources, as the chart check finds them) is in
// operations.md's Configuration section, and every variable of that
// section's table is one converge reads.
func TestConfigurationDocumentsEveryVariable(t *testing.T) {
	reads := env(t)["converge"]
	section := configurationSection(t)
	var missing []string
	for name := range reads {
		if !strings.Contains(section, "`"+name+"`") {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("converge reads %v, which docs/operations.md's Configuration section does not list", missing)
	}
	row := regexp.MustCompile("(?m)^\\| ((?:`[A-Z][A-Z0-9_]+`(?:, )?)+) \\|")
	cell := regexp.MustCompile("`([A-Z][A-Z0-9_]+)`")
	var unknown []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		for _, c := range cell.FindAllStringSubmatch(m[1], -1) {
			if !reads[c[1]] {
				unknown = append(unknown, c[1])
			}
		}
	}
	if len(unknown) > 0 {
		t.Errorf("docs/operations.md's Configuration table lists %v, which converge does not read", unknown)
	}
}
