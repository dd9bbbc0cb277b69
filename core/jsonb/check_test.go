package jsonb_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/jsonb"
	"github.com/converge-run/converge/db/pgtest"
)

// cases are documents and what Check says of each (nil: stored).
var cases = []struct {
	doc  string
	want error
}{
	{`{}`, nil},
	{` {"a": [1, -2.5e+3, 0, 0.0, 1E9, true, false, null, "x", {}, []]} `, nil},
	{`"\" \\ \/ \b \f \n \r \t \u00e9 \uD83D\uDE00"`, nil},
	{`"héllo, 世界, 😀"`, nil},
	{`"\\u0000"`, nil}, // an escaped backslash, then the text u0000
	{`1e400`, nil},     // jsonb's numeric holds it
	{`-0`, nil},
	{strings.Repeat("[", 70) + "1" + strings.Repeat("]", 70), nil}, // past the first word of levels
	{`{"a":{"b":[{"c":{}}]},"d":[]}`, nil},

	{``, jsonb.ErrSyntax},
	{`   `, jsonb.ErrSyntax},
	{`{"unterminated": `, jsonb.ErrSyntax},
	{`{"a" 1}`, jsonb.ErrSyntax},
	{`{"a":1,}`, jsonb.ErrSyntax},
	{`[1,]`, jsonb.ErrSyntax},
	{`[1 2]`, jsonb.ErrSyntax},
	{`{1:2}`, jsonb.ErrSyntax},
	{`{"a":1]`, jsonb.ErrSyntax},
	{`[1}`, jsonb.ErrSyntax},
	{`01`, jsonb.ErrSyntax},
	{`1.`, jsonb.ErrSyntax},
	{`.5`, jsonb.ErrSyntax},
	{`1e`, jsonb.ErrSyntax},
	{`+1`, jsonb.ErrSyntax},
	{`-`, jsonb.ErrSyntax},
	{`tru`, jsonb.ErrSyntax},
	{`nul`, jsonb.ErrSyntax},
	{`{} {}`, jsonb.ErrSyntax},
	{`"a` + "\n" + `b"`, jsonb.ErrSyntax},
	{`"\x"`, jsonb.ErrSyntax},
	{`"\u12"`, jsonb.ErrSyntax},
	{`"\u12g4"`, jsonb.ErrSyntax},
	{`"\ud800\u12"`, jsonb.ErrSyntax},
	{"\"\x00\"", jsonb.ErrSyntax},
	{"{\"a\":1}\x00", jsonb.ErrSyntax},
	{"\xef\xbb\xbf{}", jsonb.ErrSyntax}, // a byte order mark
	{`'a'`, jsonb.ErrSyntax},
	{`NaN`, jsonb.ErrSyntax},
	{strings.Repeat("[", jsonb.MaxDepth+1) + strings.Repeat("]", jsonb.MaxDepth+1), jsonb.ErrDepth},

	{"\"\xff\"", jsonb.ErrUTF8},
	{"{\"\xc3\":1}", jsonb.ErrUTF8},
	{"\"\xed\xa0\x80\"", jsonb.ErrUTF8}, // a surrogate encoded in UTF-8
	{`"\u0000"`, jsonb.ErrNUL},
	{`{"a":"x\u0000y"}`, jsonb.ErrNUL},
	{`"\\\u0000"`, jsonb.ErrNUL}, // an escaped backslash, then the escape
	{`"\ud800"`, jsonb.ErrSurrogate},
	{`"\udc00"`, jsonb.ErrSurrogate},
	{`"\ud83dx"`, jsonb.ErrSurrogate},
	{`"\ud800\ud800"`, jsonb.ErrSurrogate},
	{`"\ud800\u0041"`, jsonb.ErrSurrogate},
	{`"\ude00\ud83d"`, jsonb.ErrSurrogate}, // a pair in the wrong order
}

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, c := range cases {
		require.ErrorIs(t, jsonb.Check([]byte(c.doc)), c.want, "%.80q", c.doc) // a nil want: no error
	}
}

// TestCheck_AgreesWithPostgres: every document Check accepts, Postgres
// stores as jsonb, and every one it refuses, Postgres refuses — the nesting
// limit's document included, at the deepest Check accepts and one past it.
func TestCheck_AgreesWithPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	docs := []string{strings.Repeat("[", jsonb.MaxDepth) + strings.Repeat("]", jsonb.MaxDepth)}
	for _, c := range cases {
		docs = append(docs, c.doc)
	}
	for _, doc := range docs {
		checked := jsonb.Check([]byte(doc))
		if errors.Is(checked, jsonb.ErrDepth) {
			continue // Postgres' own bound is its stack, not a depth
		}
		// Sent as bytes: a text parameter would be refused by pgx or the
		// server for its encoding before the JSON parser saw it.
		_, stored := conn.Exec(ctx, `SELECT convert_from($1::bytea, 'UTF8')::jsonb`, []byte(doc))
		if checked == nil {
			require.NoError(t, stored, "Postgres refused %.80q, which Check accepts", doc)
		} else {
			require.Error(t, stored, "Postgres stored %.80q, which Check refused: %v", doc, checked)
		}
	}
}

// FuzzCheck: Check's syntax is encoding/json.Valid's, and of a well-formed
// document it refuses invalid UTF-8 when utf8.Valid does (and says so only
// then), and
// accepts every valid UTF-8 one with no \u escape.
func FuzzCheck(f *testing.F) {
	for _, c := range cases {
		if len(c.doc) < 1024 { // the nesting limit's 20 KB slows the mutator to a crawl
			f.Add([]byte(c.doc))
		}
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		err := jsonb.Check(doc)
		malformed := errors.Is(err, jsonb.ErrSyntax) || errors.Is(err, jsonb.ErrDepth)
		if malformed == json.Valid(doc) {
			t.Fatalf("Check(%q) = %v, json.Valid = %v", doc, err, json.Valid(doc))
		}
		if malformed {
			return
		}
		if !utf8.Valid(doc) && err == nil || errors.Is(err, jsonb.ErrUTF8) && utf8.Valid(doc) {
			t.Fatalf("Check(%q) = %v, utf8.Valid = %v", doc, err, utf8.Valid(doc))
		}
		if utf8.Valid(doc) && !strings.Contains(string(doc), `\u`) && err != nil {
			t.Fatalf("Check(%q) = %v, for a valid UTF-8 document with no \\u escape", doc, err)
		}
	})
}

func BenchmarkCheck(b *testing.B) {
	doc := []byte(`{"cidr":"10.0.0.0/16","region":"eu-west-1","tags":{"team":"net","env":"prod"},"subnets":[{"zone":"a","size":24},{"zone":"b","size":24}],"note":"the shared VPC \u00e9"}`)
	b.Run("jsonb.Check", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		for b.Loop() {
			if jsonb.Check(doc) != nil {
				b.Fatal("refused")
			}
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		for b.Loop() {
			if !json.Valid(doc) {
				b.Fatal("refused")
			}
		}
	})
}
