package graph_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/converge-run/converge/graph"
)

// contractPath is the shared contract when this checkout sits beside
// shared/ (../shared/spec from the repository root), else the copy
// committed in graph/contract.
func contractPath(t *testing.T) string {
	t.Helper()
	shared := filepath.Join("..", "..", "shared", "spec", "contract.graphqls")
	if _, err := os.Stat(shared); err == nil {
		return shared
	}
	return filepath.Join("contract", "contract.graphqls")
}

func loadContract(t *testing.T) *ast.Schema {
	t.Helper()
	path := contractPath(t)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read contract: %v", err)
	}
	s, gerr := gqlparser.LoadSchema(&ast.Source{Name: path, Input: string(b)})
	if gerr != nil {
		t.Fatalf("parse contract %s: %v", path, gerr)
	}
	return s
}

// TestContract_ServedSchemaHasNoBreakingChange: every type, field,
// argument, input field and enum value of contract.graphqls is served with
// the same kind and type; what the server adds is additive (new arguments
// and input fields are optional).
func TestContract_ServedSchemaHasNoBreakingChange(t *testing.T) {
	t.Parallel()
	served := graph.NewExecutableSchema(graph.Config{}).Schema()
	if problems := BreakingChanges(loadContract(t), served); len(problems) > 0 {
		t.Fatalf("the served schema breaks the contract:\n  %s", strings.Join(problems, "\n  "))
	}
}

// TestContract_CommittedCopyMatchesShared: graph/contract/contract.graphqls
// is the shared contract (when shared/ is there to compare with).
func TestContract_CommittedCopyMatchesShared(t *testing.T) {
	t.Parallel()
	shared := filepath.Join("..", "..", "shared", "spec", "contract.graphqls")
	a, err := os.ReadFile(shared)
	if err != nil {
		t.Skipf("no shared contract beside the repository: %v", err)
	}
	b, err := os.ReadFile(filepath.Join("contract", "contract.graphqls"))
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Fatal("graph/contract/contract.graphqls differs from ../shared/spec/contract.graphqls: copy it")
	}
}

// TestContract_DetectsBreakingChanges: the checker itself, on known breaks.
func TestContract_DetectsBreakingChanges(t *testing.T) {
	t.Parallel()
	base := `type Query { a(x: Int): String! b: [Int!]! } enum E { ONE TWO } input I { f: Int! } type T { e: E i: String } scalar S`
	cases := map[string]struct {
		reason string
		served string
		want   string
	}{
		"Identical":        {reason: "no change", served: base},
		"Additive":         {reason: "new types, fields, optional args and enum values are fine", served: `type Query { a(x: Int, y: Int = 1): String! b: [Int!]! c: Int } enum E { ONE TWO THREE } input I { f: Int! g: Int } type T { e: E i: String j: Int } scalar S type U { z: Int }`},
		"MissingType":      {reason: "a dropped type", served: `type Query { a(x: Int): String! b: [Int!]! } enum E { ONE TWO } input I { f: Int! } scalar S`, want: "type T is missing"},
		"MissingField":     {reason: "a dropped field", served: strings.Replace(base, " b: [Int!]!", "", 1), want: "field Query.b is missing"},
		"ChangedFieldType": {reason: "a changed type", served: strings.Replace(base, "b: [Int!]!", "b: [Int]!", 1), want: "field Query.b: type [Int!]! became [Int]!"},
		"MissingArg":       {reason: "a dropped argument", served: strings.Replace(base, "a(x: Int)", "a", 1), want: "argument Query.a(x) is missing"},
		"RequiredArg":      {reason: "a new required argument", served: strings.Replace(base, "a(x: Int)", "a(x: Int, y: Int!)", 1), want: "new argument Query.a(y) is required"},
		"MissingEnumValue": {reason: "a dropped enum value", served: strings.Replace(base, "ONE TWO", "ONE", 1), want: "enum value E.TWO is missing"},
		"RequiredInput":    {reason: "a new required input field", served: strings.Replace(base, "f: Int!", "f: Int! g: Int!", 1), want: "new input field I.g is required"},
		"KindChanged":      {reason: "a type that changed kind", served: strings.Replace(base, "scalar S", "enum S { X }", 1), want: "type S: SCALAR became ENUM"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := gqlparser.MustLoadSchema(&ast.Source{Input: base})
			s := gqlparser.MustLoadSchema(&ast.Source{Input: tc.served})
			got := strings.Join(BreakingChanges(c, s), "; ")
			if tc.want == "" && got != "" {
				t.Fatalf("%s: unexpected %s", tc.reason, got)
			}
			if !strings.Contains(got, tc.want) {
				t.Fatalf("%s: want %q in %q", tc.reason, tc.want, got)
			}
		})
	}
}

// BreakingChanges lists what served lacks or changed relative to contract
// (graphql-js findBreakingChanges, the parts a schema-first server can
// break).
func BreakingChanges(contract, served *ast.Schema) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	names := make([]string, 0, len(contract.Types))
	for n := range contract.Types {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		c := contract.Types[name]
		if c.BuiltIn {
			continue
		}
		s, ok := served.Types[name]
		if !ok {
			add("type %s is missing", name)
			continue
		}
		if s.Kind != c.Kind {
			add("type %s: %s became %s", name, c.Kind, s.Kind)
			continue
		}
		switch c.Kind {
		case ast.Enum:
			for _, v := range c.EnumValues {
				if s.EnumValues.ForName(v.Name) == nil {
					add("enum value %s.%s is missing", name, v.Name)
				}
			}
		case ast.InputObject:
			for _, f := range c.Fields {
				sf := s.Fields.ForName(f.Name)
				if sf == nil {
					add("input field %s.%s is missing", name, f.Name)
					continue
				}
				if sf.Type.String() != f.Type.String() {
					add("input field %s.%s: type %s became %s", name, f.Name, f.Type, sf.Type)
				}
				if value(f.DefaultValue) != value(sf.DefaultValue) {
					add("input field %s.%s: default %s became %s", name, f.Name, value(f.DefaultValue), value(sf.DefaultValue))
				}
			}
			for _, sf := range s.Fields {
				if c.Fields.ForName(sf.Name) == nil && sf.Type.NonNull && sf.DefaultValue == nil {
					add("new input field %s.%s is required", name, sf.Name)
				}
			}
		case ast.Object, ast.Interface:
			for _, f := range c.Fields {
				sf := s.Fields.ForName(f.Name)
				if sf == nil {
					add("field %s.%s is missing", name, f.Name)
					continue
				}
				if sf.Type.String() != f.Type.String() {
					add("field %s.%s: type %s became %s", name, f.Name, f.Type, sf.Type)
				}
				for _, a := range f.Arguments {
					sa := sf.Arguments.ForName(a.Name)
					if sa == nil {
						add("argument %s.%s(%s) is missing", name, f.Name, a.Name)
						continue
					}
					if sa.Type.String() != a.Type.String() {
						add("argument %s.%s(%s): type %s became %s", name, f.Name, a.Name, a.Type, sa.Type)
					}
					if value(a.DefaultValue) != value(sa.DefaultValue) {
						add("argument %s.%s(%s): default %s became %s", name, f.Name, a.Name, value(a.DefaultValue), value(sa.DefaultValue))
					}
				}
				for _, sa := range sf.Arguments {
					if f.Arguments.ForName(sa.Name) == nil && sa.Type.NonNull && sa.DefaultValue == nil {
						add("new argument %s.%s(%s) is required", name, f.Name, sa.Name)
					}
				}
			}
		case ast.Union:
			for _, t := range c.Types {
				if !contains(s.Types, t) {
					add("union %s lost member %s", name, t)
				}
			}
		}
	}
	for _, op := range []struct {
		name     string
		contract *ast.Definition
		served   *ast.Definition
	}{{"query", contract.Query, served.Query}, {"mutation", contract.Mutation, served.Mutation},
		{"subscription", contract.Subscription, served.Subscription}} {
		if op.contract != nil && (op.served == nil || op.served.Name != op.contract.Name) {
			add("the %s root type is not %s", op.name, op.contract.Name)
		}
	}
	return out
}

func value(v *ast.Value) string {
	if v == nil {
		return "<none>"
	}
	return v.String()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestSchema_EveryTypeAndFieldIsDescribed: the docs pane is the reference,
// so nothing the schema defines goes undescribed.
func TestSchema_EveryTypeAndFieldIsDescribed(t *testing.T) {
	t.Parallel()
	s := graph.NewExecutableSchema(graph.Config{}).Schema()
	var missing []string
	for name, d := range s.Types {
		if d.BuiltIn || strings.HasPrefix(name, "__") {
			continue
		}
		if strings.TrimSpace(d.Description) == "" {
			missing = append(missing, "type "+name)
		}
		for _, f := range d.Fields {
			if strings.HasPrefix(f.Name, "__") {
				continue
			}
			if strings.TrimSpace(f.Description) == "" {
				missing = append(missing, "field "+name+"."+f.Name)
			}
		}
		for _, v := range d.EnumValues {
			if strings.TrimSpace(v.Description) == "" {
				missing = append(missing, "enum value "+name+"."+v.Name)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("undescribed:\n  %s", strings.Join(missing, "\n  "))
	}
}
