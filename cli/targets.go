package cli

import (
	"context"
	"fmt"
	"strings"
)

// target is what a command's TYPE [NAME...] arguments name: a built-in
// type, or a resource kind used as a type (kubectl's habit: get bom,
// get bom acme, describe bom/acme), and the names that follow.
type target struct {
	t objType
	// kind is the resource kind TYPE named ("" for a built-in type word).
	kind  string
	names []string
}

// builtinType reads a built-in type word; ok is false for anything else
// (which may still be a kind).
func builtinType(s string) (objType, bool) {
	in := strings.ToLower(strings.TrimSpace(s))
	for _, o := range objTypes {
		if in == string(o.t) || contains(o.aliases, in) {
			return o.t, true
		}
	}
	return "", false
}

// slashForm splits TYPE/NAME arguments: every argument is either
// BUILTIN/NAME (resource/bom/acme, pc/vpc/default, kind/vpc, rb/x) or a
// resource's KIND/NAME (bom/acme). All must name the same type.
func slashForm(args []string) (objType, []string, error) {
	var t objType
	names := make([]string, 0, len(args))
	for _, arg := range args {
		prefix, rest, ok := strings.Cut(arg, "/")
		if !ok || prefix == "" || rest == "" {
			return "", nil, usageError{fmt.Errorf("%q: mix of TYPE/NAME and bare names (write every argument as TYPE/NAME)", arg)}
		}
		at, builtin := builtinType(prefix)
		name := rest
		if !builtin {
			at, name = typeResource, arg
		}
		if t != "" && at != t {
			return "", nil, usageError{fmt.Errorf("%q is a %s, %q a %s: one type per command", args[0], t, arg, at)}
		}
		t = at
		names = append(names, name)
	}
	return t, names, nil
}

// resolveTarget reads a command's TYPE [NAME...] (or TYPE/NAME...)
// arguments. A TYPE that is no built-in type is looked up among the
// applied kinds (by name, or its plural with a trailing s); the resource
// type must then be in allowed (none = all).
func (a *app) resolveTarget(ctx context.Context, args []string, allowed ...objType) (target, error) {
	check := func(tg target, word string) (target, error) {
		if len(allowed) > 0 && !contains(allowed, tg.t) {
			return target{}, usageError{fmt.Errorf("type %q is not supported here (use one of %s)", word, typeList(allowed))}
		}
		return tg, nil
	}
	if strings.Contains(args[0], "/") {
		t, names, err := slashForm(args)
		if err != nil {
			return target{}, err
		}
		return check(target{t: t, names: names}, args[0])
	}
	if t, ok := builtinType(args[0]); ok {
		return check(target{t: t, names: args[1:]}, args[0])
	}
	if len(allowed) > 0 && !contains(allowed, typeResource) {
		_, err := parseObjType(args[0], allowed...)
		return target{}, err
	}
	kind, err := a.kindNamed(ctx, args[0])
	if err != nil {
		return target{}, err
	}
	return target{t: typeResource, kind: kind, names: args[1:]}, nil
}

// kindNamed finds the applied kind a TYPE word names (exact, or a plural).
func (a *app) kindNamed(ctx context.Context, word string) (string, error) {
	kinds, err := a.kindNames(ctx)
	if err != nil {
		return "", err
	}
	w := strings.ToLower(strings.TrimSpace(word))
	candidates := []string{w, strings.TrimSuffix(w, "s"), strings.TrimSuffix(w, "es")}
	for _, cand := range candidates {
		if contains(kinds, cand) {
			return cand, nil
		}
	}
	var builtin []objType
	for _, o := range objTypes {
		builtin = append(builtin, o.t)
	}
	known := "no kinds are applied yet"
	if len(kinds) > 0 {
		known = "applied kinds: " + strings.Join(kinds, ", ")
	}
	return "", usageError{fmt.Errorf("unknown type %q: neither a built-in type (%s) nor an applied kind (%s)",
		word, typeList(builtin), known)}
}

// kindNames lists the applied kinds' names (once per run).
func (a *app) kindNames(ctx context.Context) ([]string, error) {
	if a.kinds != nil {
		return a.kinds, nil
	}
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	resp, err := ListKinds(ctx, c.GQL)
	if err != nil {
		return nil, fmt.Errorf("list kinds: %w", apiError(err))
	}
	names := []string{}
	for _, k := range resp.Kinds {
		if !contains(names, k.Name) {
			names = append(names, k.Name)
		}
	}
	a.kinds = names
	return names, nil
}

// resourceRefs turns a resource target's names into references (NAME
// takes the kind TYPE or --kind named).
func (tg target) resourceRefs(flagKind string) ([]ref, error) {
	kind := tg.kind
	if kind != "" && flagKind != "" && flagKind != kind {
		return nil, usageError{fmt.Errorf("the type names kind %s but --kind is %s", kind, flagKind)}
	}
	if kind == "" {
		kind = flagKind
	}
	refs := make([]ref, 0, len(tg.names))
	for _, n := range tg.names {
		r, err := parseRef(n, kind)
		if err != nil {
			return nil, err
		}
		refs = append(refs, r)
	}
	return refs, nil
}
