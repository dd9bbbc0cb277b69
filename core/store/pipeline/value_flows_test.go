package pipeline

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// referenceApplyValueFlows is apply_value_flows as it was before the inlined
// fast path (one plpgsql loop, pointers parsed by json_pointer_path, every
// level re-read from the root), kept here only as the oracle the current
// function must agree with on every input.
const referenceApplyValueFlows = `
CREATE FUNCTION apply_value_flows_reference(p_spec jsonb, p_srcs jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    v_doc    jsonb := p_spec;
    v_flows  jsonb;
    v_status jsonb;
    v_flow   jsonb;
    v_val    jsonb;
    v_path   text[];
    v_node   jsonb;
    v_ok     boolean;
    s        int;
    f        int;
    i        int;
BEGIN
    IF jsonb_typeof(p_srcs) IS DISTINCT FROM 'array' THEN
        RETURN p_spec;
    END IF;
    FOR s IN 0 .. jsonb_array_length(p_srcs) - 1 LOOP
        v_flows := p_srcs->s->0;
        v_status := p_srcs->s->1;
        CONTINUE WHEN jsonb_typeof(v_flows) IS DISTINCT FROM 'array' OR v_status IS NULL;
        FOR f IN 0 .. jsonb_array_length(v_flows) - 1 LOOP
            v_flow := v_flows->f;
            CONTINUE WHEN jsonb_typeof(v_flow->'src_field') IS DISTINCT FROM 'string'
                       OR jsonb_typeof(v_flow->'dep_field') IS DISTINCT FROM 'string';
            v_val := v_status #> json_pointer_path(v_flow->>'src_field');
            CONTINUE WHEN v_val IS NULL;
            v_path := json_pointer_path(v_flow->>'dep_field');
            CONTINUE WHEN cardinality(v_path) = 0;
            IF v_doc IS NULL OR jsonb_typeof(v_doc) NOT IN ('object', 'array') THEN
                v_doc := '{}';
            END IF;
            v_ok := true;
            FOR i IN 1 .. cardinality(v_path) LOOP
                v_node := CASE WHEN i = 1 THEN v_doc ELSE v_doc #> v_path[1:i - 1] END;
                IF jsonb_typeof(v_node) = 'array' AND v_path[i] !~ '^-?[0-9]+$' THEN
                    v_ok := false;
                    EXIT;
                END IF;
                IF i < cardinality(v_path) THEN
                    v_node := v_doc #> v_path[1:i];
                    IF v_node IS NULL THEN
                        v_doc := jsonb_set(v_doc, v_path[1:i], '{}', true);
                    ELSIF jsonb_typeof(v_node) NOT IN ('object', 'array') THEN
                        v_ok := false;
                        EXIT;
                    END IF;
                END IF;
            END LOOP;
            CONTINUE WHEN NOT v_ok;
            v_doc := jsonb_set(v_doc, v_path, v_val, true);
        END LOOP;
    END LOOP;
    RETURN v_doc;
END
$$;

-- avf_try: the function's result as text, or its error, so one query can
-- compare many inputs. Dynamic SQL, so the SQL function is inlined as in the
-- drain's statement.
CREATE FUNCTION avf_try(p_fn text, p_spec jsonb, p_srcs jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v jsonb;
BEGIN
    EXECUTE format('SELECT %I($1, $2)', p_fn) INTO v USING p_spec, p_srcs;
    RETURN coalesce(v::text, '<null>');
EXCEPTION WHEN OTHERS THEN
    RETURN 'ERROR: ' || SQLERRM;
END
$$;
`

// avfCase is one input; a nil pointer is SQL NULL.
type avfCase struct {
	spec, srcs *string
}

func js(s string) *string { return &s }

// avfCompare returns, per input, what apply_value_flows and the reference
// return (result text or error).
func avfCompare(t *testing.T, f *fx, cases []avfCase) (got, want []string) {
	t.Helper()
	specs := make([]*string, len(cases))
	srcs := make([]*string, len(cases))
	for i, c := range cases {
		specs[i], srcs[i] = c.spec, c.srcs
	}
	rows, err := f.pool.Query(f.ctx, `
		SELECT avf_try('apply_value_flows', s, r), avf_try('apply_value_flows_reference', s, r)
		  FROM unnest($1::text[]::jsonb[], $2::text[]::jsonb[]) WITH ORDINALITY AS u(s, r, n)
		 ORDER BY n`, specs, srcs)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var g, w string
		require.NoError(t, rows.Scan(&g, &w))
		got, want = append(got, g), append(want, w)
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, len(cases))
	return got, want
}

func newAVFFx(t *testing.T) *fx {
	f := newFx(t)
	f.exec(referenceApplyValueFlows)
	return f
}

func flows1(src, dep string, status string) *string {
	return js(fmt.Sprintf(`[[[{"src_field":%q,"dep_field":%q}], %s]]`, src, dep, status))
}

func TestApplyValueFlows_Cases(t *testing.T) {
	t.Parallel()
	f := newAVFFx(t)
	cases := map[string]struct {
		reason string
		in     avfCase
		want   string
	}{
		"OneSegment":         {"the common flow sets one key", avfCase{js(`{"a":1}`), flows1("/vpc_id", "/vpc_id", `{"vpc_id":"v"}`)}, `{"a": 1, "vpc_id": "v"}`},
		"OneSegmentReplace":  {"an existing key is replaced", avfCase{js(`{"vpc_id":"old"}`), flows1("/vpc_id", "/vpc_id", `{"vpc_id":"v"}`)}, `{"vpc_id": "v"}`},
		"RenamedKey":         {"src and dep differ", avfCase{js(`{}`), flows1("/id", "/vpc_id", `{"id":7}`)}, `{"vpc_id": 7}`},
		"SrcMissing":         {"a src_field absent from the status leaves the spec alone", avfCase{js(`{"a":1}`), flows1("/nope", "/x", `{"id":7}`)}, `{"a": 1}`},
		"SrcJSONNull":        {"a JSON null value is still a value", avfCase{js(`{"a":1}`), flows1("/n", "/x", `{"n":null}`)}, `{"a": 1, "x": null}`},
		"StatusArray":        {"a numeric src segment indexes an array status", avfCase{js(`{}`), flows1("/1", "/x", `["a","b"]`)}, `{"x": "b"}`},
		"StatusScalar":       {"a scalar status has no fields", avfCase{js(`{}`), flows1("/a", "/x", `5`)}, `{}`},
		"NestedCreate":       {"missing intermediate objects are created", avfCase{js(`{}`), flows1("/a", "/x/y/z", `{"a":1}`)}, `{"x": {"y": {"z": 1}}}`},
		"NestedSrc":          {"a deep src_field", avfCase{js(`{}`), flows1("/a/b", "/x", `{"a":{"b":[1]}}`)}, `{"x": [1]}`},
		"ThroughScalar":      {"a dep path through a scalar is skipped", avfCase{js(`{"x":5}`), flows1("/a", "/x/y", `{"a":1}`)}, `{"x": 5}`},
		"ArrayNonNumeric":    {"a non-numeric index into an array is skipped", avfCase{js(`{"x":[1,2]}`), flows1("/a", "/x/k", `{"a":1}`)}, `{"x": [1, 2]}`},
		"ArrayNumeric":       {"a numeric index into an array replaces the element", avfCase{js(`{"x":[1,2]}`), flows1("/a", "/x/1", `{"a":9}`)}, `{"x": [1, 9]}`},
		"ArrayNegative":      {"a negative index counts from the end", avfCase{js(`{"x":[1,2]}`), flows1("/a", "/x/-1", `{"a":9}`)}, `{"x": [1, 9]}`},
		"ArrayAppend":        {"an index past the end appends", avfCase{js(`{"x":[1,2]}`), flows1("/a", "/x/7", `{"a":9}`)}, `{"x": [1, 2, 9]}`},
		"ArrayAppendDeeper":  {"an appended intermediate is not found again, so the flow is a no-op past it", avfCase{js(`{"x":[1]}`), flows1("/a", "/x/5/y", `{"a":9}`)}, `{"x": [1, {}]}`},
		"SpecArrayTop":       {"a top-level array spec with a key is skipped", avfCase{js(`[1]`), flows1("/a", "/k", `{"a":9}`)}, `[1]`},
		"SpecArrayIndex":     {"a top-level array spec with an index", avfCase{js(`[1]`), flows1("/a", "/0", `{"a":9}`)}, `[9]`},
		"SpecNull":           {"a NULL spec becomes an object", avfCase{nil, flows1("/a", "/k", `{"a":9}`)}, `{"k": 9}`},
		"SpecScalar":         {"a scalar spec becomes an object", avfCase{js(`"s"`), flows1("/a", "/k", `{"a":9}`)}, `{"k": 9}`},
		"SpecNullNoFlow":     {"a NULL spec stays NULL when nothing applies", avfCase{nil, flows1("/b", "/k", `{"a":9}`)}, `<null>`},
		"EscapeSlash":        {"~1 is a slash", avfCase{js(`{}`), flows1("/a~1b", "/c~1d", `{"a/b":1}`)}, `{"c/d": 1}`},
		"EscapeTilde":        {"~0 is a tilde, and ~01 is ~1 not /", avfCase{js(`{}`), flows1("/a~0b", "/c~01", `{"a~b":1}`)}, `{"c~1": 1}`},
		"RootDep":            {"a root dep_field is skipped", avfCase{js(`{"a":1}`), flows1("/a", "", `{"a":2}`)}, `{"a": 1}`},
		"SlashDep":           {"'/' is the root too", avfCase{js(`{"a":1}`), flows1("/a", "/", `{"a":2}`)}, `{"a": 1}`},
		"RootSrc":            {"a root src_field is the whole status", avfCase{js(`{}`), flows1("", "/s", `{"a":2}`)}, `{"s": {"a": 2}}`},
		"EmptySegment":       {"'//' names the empty key below the empty key", avfCase{js(`{}`), flows1("/a", "//", `{"a":2}`)}, `{"": {"": 2}}`},
		"NoLeadingSlash":     {"a pointer without its slash loses its first character", avfCase{js(`{}`), flows1("/a", "xk", `{"a":2}`)}, `{"k": 2}`},
		"NonStringSrc":       {"a non-string src_field is skipped", avfCase{js(`{}`), js(`[[[{"src_field":5,"dep_field":"/x"}], {"a":1}]]`)}, `{}`},
		"MissingDep":         {"a flow without dep_field is skipped", avfCase{js(`{}`), js(`[[[{"src_field":"/a"}], {"a":1}]]`)}, `{}`},
		"FlowNotObject":      {"a flow that is not an object is skipped", avfCase{js(`{}`), js(`[[["/a"], {"a":1}]]`)}, `{}`},
		"NoStatus":           {"an upstream without status is skipped", avfCase{js(`{}`), js(`[[[{"src_field":"/a","dep_field":"/x"}]]]`)}, `{}`},
		"SrcsNotArray":       {"srcs that are not an array return the spec", avfCase{js(`{"a":1}`), js(`{"0":[[{"src_field":"/a","dep_field":"/x"}],{"a":1}]}`)}, `{"a": 1}`},
		"SrcItemObject":      {"an upstream item that is an object is skipped", avfCase{js(`{}`), js(`[{"0":[{"src_field":"/a","dep_field":"/x"}],"1":{"a":1}}]`)}, `{}`},
		"FlowsObject":        {"flows that are an object are skipped", avfCase{js(`{}`), js(`[[{"0":{"src_field":"/a","dep_field":"/x"}}, {"a":1}]]`)}, `{}`},
		"SrcsNull":           {"NULL srcs return the spec", avfCase{js(`{"a":1}`), nil}, `{"a": 1}`},
		"Ordering":           {"later flows win, across upstreams in order", avfCase{js(`{}`), js(`[[[{"src_field":"/a","dep_field":"/x"},{"src_field":"/b","dep_field":"/x"}], {"a":1,"b":2}], [[{"src_field":"/c","dep_field":"/x"}], {"c":3}]]`)}, `{"x": 3}`},
		"OrderingThenNested": {"a later flow may write below an earlier one's value", avfCase{js(`{}`), js(`[[[{"src_field":"/o","dep_field":"/x"},{"src_field":"/b","dep_field":"/x/y"}], {"o":{"k":1},"b":2}]]`)}, `{"x": {"k": 1, "y": 2}}`},
		"TwoUpstreams":       {"two upstreams each set their field", avfCase{js(`{}`), js(`[[[{"src_field":"/a","dep_field":"/x"}], {"a":1}], [[{"src_field":"/b","dep_field":"/y"}], {"b":2}]]`)}, `{"x": 1, "y": 2}`},
		"EmptyFlows":         {"no flows, no change", avfCase{js(`{"a":1}`), js(`[[[], {"a":1}]]`)}, `{"a": 1}`},
	}
	names := make([]string, 0, len(cases))
	in := make([]avfCase, 0, len(cases))
	for name, c := range cases {
		names = append(names, name)
		in = append(in, c.in)
	}
	got, ref := avfCompare(t, f, in)
	for i, name := range names {
		c := cases[name]
		if diff := cmp.Diff(c.want, got[i]); diff != "" {
			t.Errorf("%s: %s: apply_value_flows (-want +got):\n%s", name, c.reason, diff)
		}
		if diff := cmp.Diff(ref[i], got[i]); diff != "" {
			t.Errorf("%s: %s: differs from the reference (-reference +got):\n%s", name, c.reason, diff)
		}
	}
}

// TestApplyValueFlows_MatchesReference compares apply_value_flows with the
// reference over generated inputs: specs, statuses, pointers (escapes, array
// indexes, empty segments, malformed ones) and malformed srcs.
func TestApplyValueFlows_MatchesReference(t *testing.T) {
	t.Parallel()
	f := newAVFFx(t)
	rng := rand.New(rand.NewSource(13))
	keys := []string{"a", "b", "x", "vpc_id", "0", "1", "a/b", "a~b", "~1", ""}
	var value func(depth int) any
	value = func(depth int) any {
		switch n := rng.Intn(10); {
		case depth > 2 || n < 3:
			return []any{1, "s", true, nil, 2.5}[rng.Intn(5)]
		case n < 7:
			m := map[string]any{}
			for i := rng.Intn(4); i > 0; i-- {
				m[keys[rng.Intn(len(keys))]] = value(depth + 1)
			}
			return m
		default:
			a := []any{}
			for i := rng.Intn(3); i > 0; i-- {
				a = append(a, value(depth+1))
			}
			return a
		}
	}
	segs := []string{"a", "b", "x", "vpc_id", "0", "1", "-1", "5", "99999999999", "a~1b", "a~0b", "~01", "~", "k", ""}
	pointer := func() any {
		switch rng.Intn(20) {
		case 0:
			return ""
		case 1:
			return "/"
		case 2:
			return "a"
		case 3:
			return 5
		case 4:
			return nil
		}
		var b strings.Builder
		for i := 1 + rng.Intn(3); i > 0; i-- {
			b.WriteString("/" + segs[rng.Intn(len(segs))])
		}
		return b.String()
	}
	flow := func() any {
		switch rng.Intn(12) {
		case 0:
			return "/a"
		case 1:
			return map[string]any{"src_field": pointer()}
		}
		return map[string]any{"src_field": pointer(), "dep_field": pointer()}
	}
	src := func() any {
		switch rng.Intn(12) {
		case 0:
			return 5
		case 1:
			return []any{[]any{flow()}}
		case 2:
			return map[string]any{"0": []any{flow()}, "1": value(0)}
		}
		fl := []any{}
		for i := rng.Intn(4); i > 0; i-- {
			fl = append(fl, flow())
		}
		if rng.Intn(3) > 0 {
			fl = []any{flow()} // the common single flow
		}
		return []any{fl, value(0)}
	}
	enc := func(v any) *string {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return js(string(b))
	}
	var cases []avfCase
	for len(cases) < 4000 {
		var c avfCase
		switch rng.Intn(10) {
		case 0:
			c.spec = nil
		case 1:
			c.spec = enc(value(2))
		default:
			c.spec = enc(value(0))
		}
		switch n := rng.Intn(20); n {
		case 0:
			c.srcs = nil
		case 1:
			c.srcs = enc(value(0))
		default:
			s := []any{src()}
			if n > 14 {
				s = append(s, src())
			}
			c.srcs = enc(s)
		}
		cases = append(cases, c)
	}
	got, ref := avfCompare(t, f, cases)
	bad := 0
	for i := range cases {
		if got[i] != ref[i] {
			bad++
			if bad <= 10 {
				t.Errorf("spec %s srcs %s: apply_value_flows %s, reference %s", deref(cases[i].spec), deref(cases[i].srcs), got[i], ref[i])
			}
		}
	}
	require.Zero(t, bad, "inputs where apply_value_flows differs from the reference")
}

func deref(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}
