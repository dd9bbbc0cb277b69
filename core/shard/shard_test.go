package shard

import "testing"

func TestRange(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		r      Range
		empty  bool
		last   int
		length int
		str    string
	}{
		"All":     {reason: "the whole space is 0..255", r: All, last: 255, length: 256, str: "0-255"},
		"Between": {reason: "Between takes inclusive bounds", r: Between(16, 31), last: 31, length: 16, str: "16-31"},
		"One":     {reason: "a single shard", r: Between(3, 3), last: 3, length: 1, str: "3-3"},
		"Zero":    {reason: "the zero value owns nothing", r: Range{}, empty: true, last: -1, str: "empty"},
		"Inverted": {reason: "Hi below Lo is empty, not negative", r: Range{Lo: 9, Hi: 4}, empty: true, last: 3,
			str: "empty"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := c.r.Empty(); got != c.empty {
				t.Errorf("%s: Empty() = %v, want %v", c.reason, got, c.empty)
			}
			if !c.empty && c.r.Last() != c.last {
				t.Errorf("%s: Last() = %d, want %d", c.reason, c.r.Last(), c.last)
			}
			if got := c.r.Len(); got != c.length {
				t.Errorf("%s: Len() = %d, want %d", c.reason, got, c.length)
			}
			if got := c.r.String(); got != c.str {
				t.Errorf("%s: String() = %q, want %q", c.reason, got, c.str)
			}
		})
	}
}
