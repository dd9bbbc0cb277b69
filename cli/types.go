package cli

import (
	"fmt"
	"strings"
)

// objType is a type the get/list/delete/watch commands take.
type objType string

// The object types.
const (
	typeResource       objType = "resource"
	typeKind           objType = "kind"
	typeProviderConfig objType = "providerconfig"
	typeReactorBinding objType = "reactorbinding"
	typeClusterMember  objType = "clustermember"
	typeOperation      objType = "operation"
)

// objTypes are the types with their accepted spellings (singular, plural
// and kubectl-style short aliases).
var objTypes = []struct {
	t       objType
	aliases []string
}{
	{typeResource, []string{"resources", "res"}},
	{typeKind, []string{"kinds", "crd", "crds", "manifest", "manifests"}},
	{typeProviderConfig, []string{"providerconfigs", "pc", "pcs"}},
	{typeReactorBinding, []string{"reactorbindings", "rb", "rbs"}},
	{typeClusterMember, []string{"clustermembers", "member", "members", "node", "nodes"}},
	{typeOperation, []string{"operations", "op", "ops"}},
}

// parseObjType reads a TYPE argument; allowed limits the types a command
// takes (none = all).
func parseObjType(s string, allowed ...objType) (objType, error) {
	in := strings.ToLower(strings.TrimSpace(s))
	for _, o := range objTypes {
		if in != string(o.t) && !contains(o.aliases, in) {
			continue
		}
		if len(allowed) > 0 && !contains(allowed, o.t) {
			return "", usageError{fmt.Errorf("type %q is not supported here (use one of %s)", s, typeList(allowed))}
		}
		return o.t, nil
	}
	if len(allowed) == 0 {
		for _, o := range objTypes {
			allowed = append(allowed, o.t)
		}
	}
	return "", usageError{fmt.Errorf("unknown type %q (use one of %s)", s, typeList(allowed))}
}

func typeList(ts []objType) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = string(t)
	}
	return strings.Join(parts, ", ")
}

func contains[T comparable](xs []T, x T) bool {
	for _, e := range xs {
		if e == x {
			return true
		}
	}
	return false
}

// ref is a KIND/NAME reference.
type ref struct{ kind, name string }

func (r ref) String() string { return r.kind + "/" + r.name }

// parseRef reads KIND/NAME, or NAME when kind is given by --kind.
func parseRef(s, kind string) (ref, error) {
	k, n, ok := strings.Cut(s, "/")
	switch {
	case ok && k != "" && n != "" && !strings.Contains(n, "/"):
		if kind != "" && kind != k {
			return ref{}, usageError{fmt.Errorf("%q names kind %s but --kind is %s", s, k, kind)}
		}
		return ref{kind: k, name: n}, nil
	case !ok && s != "" && kind != "":
		return ref{kind: kind, name: s}, nil
	}
	return ref{}, usageError{fmt.Errorf("%q: want KIND/NAME (or NAME with --kind)", s)}
}
