package pipeline

import (
	"encoding/json"
	"maps"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecodeLabels(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]map[string]string{
		`{}`:                                   nil,
		` { } `:                                nil,
		`{"app": "web"}`:                       {"app": "web"},
		`{"a": "1", "team": "x-7", "b": ""}`:   {"a": "1", "team": "x-7", "b": ""},
		`{"k":"v","k":"w"}`:                    {"k": "w"},
		`{"q": "say \"hi\"\n", "u": "\u00e9"}`: {"q": "say \"hi\"\n", "u": "é"},
		`{"s": "a\/b"}`:                        {"s": "a/b"},
		`{"e": "😀", "p": "\ud83d\ude00"}`:      {"e": "😀", "p": "😀"},
	} {
		got, err := decodeLabels([]byte(in))
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{``, `[]`, `{"a": 1}`, `{"a": "b",}`, `{"a" "b"}`, `{"a": "b"} x`, `{"a": "b`} {
		_, err := decodeLabels([]byte(bad))
		require.Error(t, err, bad)
	}
}

// Whatever the input, decodeLabels reads what encoding/json reads (an
// empty object as nil) and fails where it fails.
func FuzzDecodeLabels(f *testing.F) {
	for _, s := range []string{`{}`, `{"a": "b"}`, `{"a":"b","c":"d"}`, `{"a": "\u00e9\n"}`, `{"a": "\/"}`,
		`{"a": null}`, `{"a": "\ud83d\ude00"}`, "{\"a\": \"\xff\"}", `{"a": "\x41"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gotErr := decodeLabels(b)
		var want map[string]string
		wantErr := json.Unmarshal(b, &want)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("decodeLabels(%q) error %v, encoding/json's %v", b, gotErr, wantErr)
		}
		if gotErr == nil && !maps.Equal(got, want) {
			t.Fatalf("decodeLabels(%q) = %q, encoding/json reads %q", b, got, want)
		}
	})
}

// encodeLabels writes what json.Marshal writes, for any labels.
func FuzzEncodeLabels(f *testing.F) {
	f.Add("app", "web", "team", "x-7")
	f.Add("a/b.c", "", "q", "say \"hi\"")
	f.Add("<", "&", "é", "\x00")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		for _, labels := range []map[string]string{nil, {k1: v1}, {k1: v1, k2: v2}} {
			want, err := json.Marshal(labels)
			require.NoError(t, err)
			if labels == nil {
				want = []byte(`{}`)
			}
			require.Equal(t, string(want), string(encodeLabels(labels)), "%q", labels)
		}
	})
}
