package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jedib0t/go-pretty/v6/table"
	"go.yaml.in/yaml/v3"
)

// The -o formats.
const (
	outTable = "table"
	outWide  = "wide"
	outJSON  = "json"
	outYAML  = "yaml"
	// outName prints one TYPE/NAME per line, for xargs: a resource as
	// KIND/NAME (bom/acme), the others as providerconfig/KIND/NAME,
	// reactorbinding/NAME, kind/NAME, clustermember/ID, operation/ID,
	// each a form every conctl command taking TYPE/NAME reads back.
	outName = "name"
)

var outputFormats = []string{outTable, outWide, outJSON, outYAML, outName}

// nameOutputCommands are the commands -o name applies to: those that list
// or act on objects. The others print one object's detail, a report or a
// stream, and refuse it.
var nameOutputCommands = []string{"conctl get", "conctl list", "conctl apply", "conctl delete", "conctl rollback",
	"conctl quarantine", "conctl unquarantine", "conctl resync", "conctl run"}

// resourceName is how -o name names a resource: KIND/NAME, or
// resource/KIND/NAME when the kind is spelled like a built-in type (a kind
// named pc would read back as a providerconfig).
func resourceName(kind, name string) string {
	if _, builtin := builtinType(kind); builtin {
		return "resource/" + kind + "/" + name
	}
	return kind + "/" + name
}

// objectName is how -o name names what apply, delete and diff report
// (actionResult.Object: resource/KIND/NAME, manifest/KIND, ...).
func objectName(object string) string {
	t, rest, _ := strings.Cut(object, "/")
	switch t {
	case "resource":
		if k, n, ok := strings.Cut(rest, "/"); ok {
			return resourceName(k, n)
		}
	case "manifest":
		return "kind/" + rest
	}
	return object
}

// printNames prints each name once, in order (-o name).
func (a *app) printNames(names ...string) {
	for _, n := range names {
		if a.named[n] {
			continue
		}
		if a.named == nil {
			a.named = map[string]bool{}
		}
		a.named[n] = true
		fmt.Fprintln(a.stdout(), n)
	}
}

// tableStyle is kubectl's look: no borders, upper-case headers, three
// spaces between columns.
var tableStyle = func() table.Style {
	s := table.StyleDefault
	s.Name = "conctl"
	s.Options = table.Options{}
	s.Box.PaddingLeft = ""
	s.Box.PaddingRight = "   "
	return s
}()

// renderTable writes header and rows, trimming trailing blanks.
func renderTable(w io.Writer, header []string, rows [][]string) error {
	t := table.NewWriter()
	t.SetStyle(tableStyle)
	h := make(table.Row, len(header))
	for i, c := range header {
		h[i] = c
	}
	t.AppendHeader(h)
	for _, r := range rows {
		row := make(table.Row, len(r))
		for i, c := range r {
			row[i] = c
		}
		t.AppendRow(row)
	}
	var b strings.Builder
	for _, line := range strings.Split(t.Render(), "\n") {
		b.WriteString(strings.TrimRight(line, " "))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeJSON writes v indented.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

// writeYAML writes v (through its JSON form, so field names match -o json).
func writeYAML(w io.Writer, v any) error {
	b, err := toYAML(v)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func toYAML(v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode YAML: %w", err)
	}
	var generic any
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	if err := dec.Decode(&generic); err != nil {
		return nil, fmt.Errorf("encode YAML: %w", err)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(yamlNumbers(generic)); err != nil {
		return nil, fmt.Errorf("encode YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode YAML: %w", err)
	}
	return buf.Bytes(), nil
}

// yamlNumbers turns json.Numbers into YAML number scalars carrying the
// number's text as JSON wrote it: an integer past int64 or a decimal with
// more digits than a float64 holds prints exactly, so what get -o yaml
// prints applies back unchanged.
func yamlNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = yamlNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = yamlNumbers(e)
		}
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(x.String(), ".eE") {
			tag = "!!float"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: x.String()}
	}
	return v
}

// humanAge is kubectl's short duration: 42s, 5m12s, 17m, 3h4m, 26h, 3d4h,
// 120d, 3y.
func humanAge(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 120:
		return fmt.Sprintf("%ds", s)
	case s < 600:
		if s%60 == 0 {
			return fmt.Sprintf("%dm", s/60)
		}
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	case s < 3*3600:
		return fmt.Sprintf("%dm", s/60)
	case s < 8*3600:
		if m := (s % 3600) / 60; m != 0 {
			return fmt.Sprintf("%dh%dm", s/3600, m)
		}
		return fmt.Sprintf("%dh", s/3600)
	case s < 48*3600:
		return fmt.Sprintf("%dh", s/3600)
	case s < 8*86400:
		if h := (s % 86400) / 3600; h != 0 {
			return fmt.Sprintf("%dd%dh", s/86400, h)
		}
		return fmt.Sprintf("%dd", s/86400)
	case s < 2*365*86400:
		return fmt.Sprintf("%dd", s/86400)
	}
	return fmt.Sprintf("%dy", s/(365*86400))
}

// labelsString renders a labels object as k=v,k=v (sorted); <none> when
// empty.
func labelsString(raw json.RawMessage) string {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || len(m) == 0 {
		return "<none>"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%v", k, m[k])
	}
	return strings.Join(parts, ",")
}

// compact renders a JSON value on one line; <none> for null or absent.
func compact(raw *json.RawMessage) string {
	if raw == nil || len(*raw) == 0 || string(*raw) == "null" {
		return "<none>"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, *raw); err != nil {
		return string(*raw)
	}
	return b.String()
}

// indentJSON renders a JSON value indented by prefix; <none> for null.
func indentJSON(raw json.RawMessage, prefix string) string {
	if len(raw) == 0 || string(raw) == "null" {
		return prefix + "<none>"
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, prefix, "  "); err != nil {
		return prefix + string(raw)
	}
	return prefix + b.String()
}

func orNone(s *string) string {
	if s == nil || *s == "" {
		return "<none>"
	}
	return *s
}

func itoa(n int) string { return strconv.Itoa(n) }

// shardSpan renders a member's shard range as served: [lo,hi), hi
// exclusive.
func shardSpan(lo, hi *int) string {
	if lo == nil || hi == nil {
		return "<none>"
	}
	return fmt.Sprintf("[%d,%d)", *lo, *hi)
}
