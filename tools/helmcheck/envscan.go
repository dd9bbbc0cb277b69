package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// The packages (relative to the main module's root) whose environment each
// image's binary reads. The variable names are found in their sources, not
// listed here: adding a variable to core/config (or the worker SDK) makes it
// legal in the chart without touching this check.
var binaryPackages = map[string][]string{
	"converge":       {"core/config", "core/api", "core/logging", "core/dbauth", "core/memlimit", "cmd/converge", "frontend"},
	"stdworker":      {"cmd/stdworker", "core/worker", "core/logging", "core/tlsreload", "core/memlimit"},
	"classic-worker": {"examples/classic/cmd/worker", "core/worker", "core/logging"},
}

// libraryEnv are variables read by libraries a binary links, not by our
// sources: allowed for the binaries that link them.
var libraryEnv = map[string]map[string]string{
	"converge": {"AWS_REGION": "the AWS SDK's default config (core/dbauth, DB_IAM_AUTH)"},
}

var envName = regexp.MustCompile(`^[A-Z][A-Z0-9_]{2,}$`)

// ScanEnv finds the environment variables the Go files of the packages
// read: in every non-test file that calls a getenv-like function (os.Getenv,
// os.LookupEnv, a getenv parameter), the string literals that are an
// argument of such a call or of a local helper taking the name
// (str(&x, "NAME"), dur(&x, "NAME"); not a method or another package's
// function), or the leading element of a table entry ({"NAME", &field}).
func ScanEnv(root string, pkgs []string) (map[string]bool, error) {
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, pkg := range pkgs {
		files, err := filepath.Glob(filepath.Join(root, pkg, "*.go"))
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", pkg, err)
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("no Go files in %s (is -root the converge source tree?)", filepath.Join(root, pkg))
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", f, err)
			}
			file, err := parser.ParseFile(fset, f, src, parser.SkipObjectResolution)
			if err != nil {
				return nil, fmt.Errorf("parse %s: %w", f, err)
			}
			if readsEnv(file) {
				collectNames(file, out)
			}
		}
	}
	return out, nil
}

func calleeName(e ast.Expr) string {
	switch fn := e.(type) {
	case *ast.Ident:
		return fn.Name
	case *ast.SelectorExpr:
		return fn.Sel.Name
	}
	return ""
}

func isGetenv(name string) bool {
	switch strings.ToLower(name) {
	case "getenv", "lookupenv":
		return true
	}
	return false
}

func readsEnv(file *ast.File) bool {
	found := false
	ast.Inspect(file, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok && isGetenv(calleeName(c.Fun)) {
			found = true
		}
		return !found
	})
	return found
}

func collectNames(file *ast.File, out map[string]bool) {
	add := func(e ast.Expr) {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return
		}
		if s, err := strconv.Unquote(lit.Value); err == nil && envName.MatchString(s) {
			out[s] = true
		}
	}
	ast.Inspect(file, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.CallExpr:
			// A method or another package's function (q.Set(k, "REDACTED"))
			// takes no variable name, unless it is a getenv.
			if sel, ok := x.Fun.(*ast.SelectorExpr); ok && !isGetenv(sel.Sel.Name) {
				return true
			}
			for _, a := range x.Args {
				add(a)
			}
		case *ast.CompositeLit:
			if len(x.Elts) > 0 {
				if _, kv := x.Elts[0].(*ast.KeyValueExpr); !kv {
					add(x.Elts[0])
				}
			}
		}
		return true
	})
}

// EnvSets scans every binary's packages once.
func EnvSets(root string) (map[string]map[string]bool, error) {
	sets := map[string]map[string]bool{}
	for bin, pkgs := range binaryPackages {
		s, err := ScanEnv(root, pkgs)
		if err != nil {
			return nil, err
		}
		for name := range libraryEnv[bin] {
			s[name] = true
		}
		sets[bin] = s
	}
	return sets, nil
}
