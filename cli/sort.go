package cli

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// sortPath reads a --sort-by value: a field path of the -o json object,
// kubectl style ({.name}, .spec.cidr) or bare (name, config.maxInflight).
func sortPath(s string) ([]string, error) {
	p := strings.TrimSpace(s)
	p = strings.TrimSuffix(strings.TrimPrefix(p, "{"), "}")
	p = strings.TrimPrefix(p, ".")
	if p == "" {
		return nil, usageError{fmt.Errorf("--sort-by %q: want a field path of the -o json object, e.g. .name or .spec.cidr", s)}
	}
	parts := strings.Split(p, ".")
	for _, part := range parts {
		if part == "" || strings.ContainsAny(part, "[]*") {
			return nil, usageError{fmt.Errorf("--sort-by %q: want a dotted field path (no [] or *), e.g. .name or .config.maxInflight", s)}
		}
	}
	return parts, nil
}

// sortItems orders xs by the field at path of each item's JSON form
// (stable; items without the field first). Numbers sort numerically,
// RFC 3339 times chronologically, strings lexically, false before true.
// It is an error when no item has the field (a misspelt path).
func sortItems[T any](xs []T, by string) error {
	if by == "" || len(xs) == 0 {
		return nil
	}
	path, err := sortPath(by)
	if err != nil {
		return err
	}
	keys := make([]any, len(xs))
	found := false
	for i := range xs {
		b, err := json.Marshal(&xs[i])
		if err != nil {
			return fmt.Errorf("--sort-by: encode: %w", err)
		}
		var v any
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("--sort-by: decode: %w", err)
		}
		keys[i] = lookupPath(v, path)
		if keys[i] != nil {
			found = true
		}
	}
	if !found {
		return usageError{fmt.Errorf("--sort-by %s: no object has this field (the fields are those of -o json)", by)}
	}
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(i, j int) bool { return lessValue(keys[idx[i]], keys[idx[j]]) })
	sorted := make([]T, len(xs))
	for i, k := range idx {
		sorted[i] = xs[k]
	}
	copy(xs, sorted)
	return nil
}

func lookupPath(v any, path []string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// lessValue orders two JSON values of a sort key; nil sorts first.
func lessValue(x, y any) bool {
	switch {
	case x == nil:
		return y != nil
	case y == nil:
		return false
	}
	if xn, ok := x.(json.Number); ok {
		if yn, ok := y.(json.Number); ok {
			xf, err1 := xn.Float64()
			yf, err2 := yn.Float64()
			if err1 == nil && err2 == nil {
				return xf < yf
			}
		}
	}
	if xb, ok := x.(bool); ok {
		if yb, ok := y.(bool); ok {
			return !xb && yb
		}
	}
	xs, xok := x.(string)
	ys, yok := y.(string)
	if xok && yok {
		xt, err1 := time.Parse(time.RFC3339Nano, xs)
		yt, err2 := time.Parse(time.RFC3339Nano, ys)
		if err1 == nil && err2 == nil {
			return xt.Before(yt)
		}
		return xs < ys
	}
	xj, _ := json.Marshal(x)
	yj, _ := json.Marshal(y)
	return string(xj) < string(yj)
}
