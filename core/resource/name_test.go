package resource

import (
	"regexp"
	"strings"
	"testing"
)

var nameRule = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,251}[a-z0-9])?$`)

func TestValidName_AgreesWithTheCheckRule(t *testing.T) {
	t.Parallel()
	cases := []string{"", "a", "0", "-", ".", "_", "a-", "-a", "a.b", "a_b", "a-b", "a..b", "A", "aB", "a b", "a/b",
		"é", "a\x00", "ab", strings.Repeat("a", 253), strings.Repeat("a", 254), "a" + strings.Repeat("-", 251) + "a",
		"a" + strings.Repeat("-", 252) + "a", "vpc-007.team_1"}
	for _, c := range cases {
		if got, want := ValidName(c), nameRule.MatchString(c); got != want {
			t.Errorf("ValidName(%q) = %v, the rule says %v", c, got, want)
		}
	}
}

func FuzzValidName(f *testing.F) {
	for _, s := range []string{"a", "a-b", "-a", "a.", "Ab", strings.Repeat("z", 254)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidName(s), nameRule.MatchString(s); got != want {
			t.Fatalf("ValidName(%q) = %v, the rule says %v", s, got, want)
		}
	})
}
