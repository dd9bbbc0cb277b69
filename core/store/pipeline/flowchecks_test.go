package pipeline

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// decodeFlowChecksJSON is the encoding/json reading parseFlowChecks
// replaced (which read a check of fewer or more than five elements as
// five, padded or cut): the reference it must agree with.
func decodeFlowChecksJSON(checks string) ([]flowCheck, error) {
	var items [][]json.RawMessage
	if err := json.Unmarshal([]byte(checks), &items); err != nil {
		return nil, err
	}
	out := make([]flowCheck, len(items))
	for i, it := range items {
		if len(it) != 5 {
			return nil, errors.New("not five elements")
		}
		c := &out[i]
		if err := errors.Join(json.Unmarshal(it[0], &c.id), json.Unmarshal(it[1], &c.kind),
			json.Unmarshal(it[2], &c.version), json.Unmarshal(it[3], &c.gen)); err != nil {
			return nil, err
		}
		c.spec = it[4]
	}
	return out, nil
}

func TestParseFlowChecks(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("0b9c6a55-7f51-4c5e-9a44-0c6f2f6e3b1a")
	for name, tc := range map[string]struct {
		in   string
		want []flowCheck
	}{
		"empty":      {`[]`, nil},
		"as printed": {`[["` + id.String() + `", "route", "v1", 3, {"vpc_id": 7, "tags": ["a", "b"]}]]`, []flowCheck{{id: id, kind: "route", version: "v1", gen: 3, spec: []byte(`{"vpc_id": 7, "tags": ["a", "b"]}`)}}},
		"compact, two": {`[["` + id.String() + `","a","",1,{}],["` + id.String() + `","b","v2",12,{"x":"]}\"[,"}]]`,
			[]flowCheck{{id: id, kind: "a", gen: 1, spec: []byte(`{}`)}, {id: id, kind: "b", version: "v2", gen: 12, spec: []byte(`{"x":"]}\"[,"}`)}}},
		"escaped kind":  {"[[\"" + id.String() + "\", \"r\\u00e9\\\"x\", \"v1\", 0, null]]", []flowCheck{{id: id, kind: "ré\"x", version: "v1", spec: []byte(`null`)}}},
		"spaces around": {" [ [ \"" + id.String() + "\" , \"k\" , \"v\" , 5 , [1, {\"a\": []}] ] ] \n", []flowCheck{{id: id, kind: "k", version: "v", gen: 5, spec: []byte(`[1, {"a": []}]`)}}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := parseFlowChecks(tc.in)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			ref, err := decodeFlowChecksJSON(tc.in)
			require.NoError(t, err)
			require.Len(t, got, len(ref))
			for i := range ref {
				require.Equal(t, string(ref[i].spec), string(got[i].spec))
			}
		})
	}
	for _, bad := range []string{``, `{}`, `[`, `[[`, `[]x`, `[["` + id.String() + `", "k", "v", 1]]`,
		`[["` + id.String() + `", "k", "v", 1, {}, 2]]`, `[["not-a-uuid", "k", "v", 1, {}]]`,
		`[["` + id.String() + `", 7, "v", 1, {}]]`, `[["` + id.String() + `", "k", "v", "1", {}]]`,
		`[["` + id.String() + `", "k", "v", 1, {"a": "b}]]`, `[["` + id.String() + `", "k", "v", 1, {}],]`,
		`[,]`, `[["` + id.String() + `", "k", "v", 1, {}] ["x"]]`} {
		_, err := parseFlowChecks(bad)
		require.Error(t, err, bad)
	}
}

// FuzzParseFlowChecks: whatever encoding/json reads as checks,
// parseFlowChecks reads the same; on anything else it errs or reads
// something, never panics.
func FuzzParseFlowChecks(f *testing.F) {
	id := "0b9c6a55-7f51-4c5e-9a44-0c6f2f6e3b1a"
	for _, s := range []string{`[]`, `[["` + id + `", "route", "v1", 3, {"vpc_id": 7}]]`,
		`[["` + id + `","a","",1,{}],["` + id + `","b","v2",12,{"x":"]}\"[,"}]]`,
		"[[\"" + id + "\", \"r\\u00e9\", \"v1\", 0, null]]", `[["` + id + `", "k", "v", 1]]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := parseFlowChecks(in)
		ref, refErr := decodeFlowChecksJSON(in)
		if refErr != nil {
			return
		}
		require.NoError(t, err, "encoding/json read %q", in)
		require.Len(t, got, len(ref))
		for i := range ref {
			require.Equal(t, ref[i].id, got[i].id)
			require.Equal(t, ref[i].kind, got[i].kind)
			require.Equal(t, ref[i].version, got[i].version)
			require.Equal(t, ref[i].gen, got[i].gen)
			require.Equal(t, string(ref[i].spec), string(got[i].spec))
		}
	})
}

// BenchmarkParseFlowChecks reads a drain batch's checks (1,000 flowed
// specs in the bench's route shape), against the encoding/json reading it
// replaced.
func BenchmarkParseFlowChecks(b *testing.B) {
	item := `["0b9c6a55-7f51-4c5e-9a44-0c6f2f6e3b1a", "route", "v1", 3, {"cidr": "10.0.0.0/24", "vpc_id": "vpc-0b9c6a557f514c5e", "subnet_id": "subnet-9a440c6f2f6e3b1a", "zone": "a"}]`
	in := "["
	for i := range 1000 {
		if i > 0 {
			in += ", "
		}
		in += item
	}
	in += "]"
	for name, parse := range map[string]func(string) ([]flowCheck, error){"scan": parseFlowChecks, "encoding-json": decodeFlowChecksJSON} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parse(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
