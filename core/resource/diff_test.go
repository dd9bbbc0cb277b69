package resource

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDiff(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		before, after string
		want          []Change
	}{
		"Equal": {before: `{"a":1,"b":[1,2]}`, after: `{"b":[1,2],"a":1}`},
		"Changed": {before: `{"a":1}`, after: `{"a":2}`,
			want: []Change{{Path: "/a", Before: json.RawMessage(`1`), After: json.RawMessage(`2`)}}},
		"AddedRemoved": {before: `{"a":1,"x/y":true}`, after: `{"b":{"c":"d"}}`,
			want: []Change{{Path: "/a", Before: json.RawMessage(`1`)}, {Path: "/b", After: json.RawMessage(`{"c":"d"}`)},
				{Path: "/x~1y", Before: json.RawMessage(`true`)}}},
		"Nested": {before: `{"a":{"b":[1,2,3]}}`, after: `{"a":{"b":[1,5]}}`,
			want: []Change{{Path: "/a/b/1", Before: json.RawMessage(`2`), After: json.RawMessage(`5`)},
				{Path: "/a/b/2", Before: json.RawMessage(`3`)}}},
		"TypeChange": {before: `{"a":[1]}`, after: `{"a":{"0":1}}`,
			want: []Change{{Path: "/a", Before: json.RawMessage(`[1]`), After: json.RawMessage(`{"0":1}`)}}},
		"Created": {after: `{"a":1}`, want: []Change{{Path: "", After: json.RawMessage(`{"a":1}`)}}},
		"LargeIntegersDiffer": {before: `{"account":123456789012345678}`, after: `{"account":123456789012345679}`,
			want: []Change{{Path: "/account", Before: json.RawMessage(`123456789012345678`), After: json.RawMessage(`123456789012345679`)}}},
		"LargeIntegerKeepsItsDigits": {after: `{"account":123456789012345679}`,
			want: []Change{{Path: "", After: json.RawMessage(`{"account":123456789012345679}`)}}},
		"EqualNumbersInAnyNotation": {before: `{"a":1,"b":-0,"c":1.5e3,"d":0.010,"e":1e400}`, after: `{"a":1.0,"b":0,"c":1500,"d":1E-2,"e":10e399}`},
		"SignsDiffer": {before: `{"a":-1,"b":-2.5e1}`, after: `{"a":1,"b":-25}`,
			want: []Change{{Path: "/a", Before: json.RawMessage(`-1`), After: json.RawMessage(`1`)}}},
		"SmallDecimalsDiffer": {before: `{"a":0.1000000000000000001}`, after: `{"a":0.1}`,
			want: []Change{{Path: "/a", Before: json.RawMessage(`0.1000000000000000001`), After: json.RawMessage(`0.1`)}}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := Diff(json.RawMessage(c.before), json.RawMessage(c.after))
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
	for reason, c := range map[string]struct{ before, after, errHas string }{
		"malformed before":            {before: `{`, errHas: "diff: before:"},
		"malformed after":             {before: `{}`, after: `[1,`, errHas: "diff: after:"},
		"a second value after before": {before: `{} {}`, after: `{}`, errHas: "diff: before: data after the JSON value"},
		"trailing bytes after after":  {before: `{}`, after: `{}x`, errHas: "diff: after: data after the JSON value"},
	} {
		_, err := Diff(json.RawMessage(c.before), json.RawMessage(c.after))
		require.ErrorContains(t, err, c.errHas, reason)
	}
}
