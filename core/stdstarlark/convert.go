package stdstarlark

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.starlark.net/starlark"
)

// maxResultNodes bounds the values in compose's result (a list repeating
// one large list a thousand times is small in memory but not as JSON).
const maxResultNodes = 4 * MaxLen

// MaxResultBytes bounds compose's result as JSON (as the programs the
// other built-in providers run are bounded on stdout): a list repeating
// one long string is small in memory but not as JSON.
const MaxResultBytes = 64 << 20

// toGo converts compose's result to JSON-shaped Go values, checking the
// context at every value (so the time limit holds) and refusing a value
// nested deeper than MaxDepth, more than maxResultNodes values, more than
// MaxResultBytes of JSON (counted before any is written), or a value JSON
// cannot hold. Ints keep every digit (json.Number).
func toGo(ctx context.Context, v starlark.Value) (any, error) {
	c := converter{ctx: ctx}
	return c.convert(v, "result", 0)
}

type converter struct {
	ctx   context.Context
	nodes int
	bytes int
}

// grow counts n bytes of the result's JSON.
func (c *converter) grow(path string, n int) error {
	if c.bytes += n; c.bytes > MaxResultBytes {
		return fmt.Errorf("%s: the result would be more than %d bytes of JSON (MaxResultBytes)", path, MaxResultBytes)
	}
	return nil
}

func (c *converter) convert(v starlark.Value, path string, depth int) (any, error) {
	if err := c.ctx.Err(); err != nil {
		return nil, err
	}
	if depth > MaxDepth {
		return nil, fmt.Errorf("%s: nested deeper than %d (MaxDepth)", path, MaxDepth)
	}
	if c.nodes++; c.nodes > maxResultNodes {
		return nil, fmt.Errorf("%s: the result holds more than %d values", path, maxResultNodes)
	}
	switch v := v.(type) {
	case starlark.NoneType:
		return nil, c.grow(path, 4)
	case starlark.Bool:
		return bool(v), c.grow(path, 5)
	case starlark.String:
		// At least its bytes and quotes (escapes only add).
		return string(v), c.grow(path, len(v)+2)
	case starlark.Int:
		s := v.String()
		return json.Number(s), c.grow(path, len(s))
	case starlark.Float:
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%s: %s is not a JSON number", path, v)
		}
		return f, c.grow(path, 24)
	case *starlark.List:
		return c.list(path, depth, v.Len(), v.Index)
	case starlark.Tuple:
		return c.list(path, depth, v.Len(), v.Index)
	case *starlark.Dict:
		if err := c.grow(path, 2); err != nil {
			return nil, err
		}
		out := make(map[string]any, v.Len())
		for _, kv := range v.Items() {
			k, ok := kv[0].(starlark.String)
			if !ok {
				return nil, fmt.Errorf("%s: a dict key is %s %s; JSON keys are strings", path, kv[0].Type(), kv[0])
			}
			if err := c.grow(path, len(k)+4); err != nil {
				return nil, err
			}
			e, err := c.convert(kv[1], at(path, "["+strconv.Quote(string(k))+"]"), depth+1)
			if err != nil {
				return nil, err
			}
			out[string(k)] = e
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: a %s is not a JSON value", path, v.Type())
}

// at extends a value's path for an error message, up to a length.
func at(path, segment string) string {
	switch {
	case strings.HasSuffix(path, "…"):
		return path
	case len(path) > 60:
		return path + "…"
	}
	return path + segment
}

func (c *converter) list(path string, depth, n int, index func(int) starlark.Value) (any, error) {
	if err := c.grow(path, 2+n); err != nil {
		return nil, err
	}
	out := make([]any, n)
	for i := range n {
		e, err := c.convert(index(i), at(path, "["+strconv.Itoa(i)+"]"), depth+1)
		if err != nil {
			return nil, err
		}
		out[i] = e
	}
	return out, nil
}
