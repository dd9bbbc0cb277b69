package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// kindTypesFlags are kind types' flags.
type kindTypesFlags struct {
	version string
	lang    string
	pkg     string
	out     string
}

func (a *app) kindTypesCommand() *cobra.Command {
	var fl kindTypesFlags
	cmd := &cobra.Command{
		Use:   "types KIND --lang go|ts [--version V] [--package NAME] [--out FILE]",
		Short: "Generate Go structs or TypeScript types from a kind's stored spec and status schemas",
		Long: `Read a kind version's stored spec_schema and status_schema and print their
types: Go structs with json tags (--lang go) or TypeScript interfaces
(--lang ts), so a provider and its clients share one source of truth. The
root types are <Kind>Spec and <Kind>Status; a nested object with properties
becomes its own type, named by its path (VpcSpecTags), a string enum a named
string type with constants (Go) or a union of literals (TypeScript), and a
local $ref (#/$defs/NAME) a type of that name. A required property is a
plain field, an optional one a pointer with omitempty (Go) or an optional
property (TypeScript); properties are sorted by name, so the output only
changes when the schema does. An untyped schema gives a map of any values.
oneOf/anyOf/allOf and a property of several types become any (Go) or
unknown (TypeScript).`,
		Example: `  # Go types for the route kind, in the package route
  conctl kind types route --lang go --out route_types.go

  # TypeScript types for version v2 of the vpc kind (it has v1 and v2)
  conctl kind types vpc --version v2 --lang ts > vpc.ts`,
		Args:              exactArgs(1),
		ValidArgsFunction: a.completeKindNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.kindTypes(cmd.Context(), args[0], fl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.lang, "lang", "", "the language: go or ts (required)")
	f.StringVar(&fl.version, "version", "", "the kind version (default: its only version)")
	f.StringVar(&fl.pkg, "package", "", "the Go package name (default: the kind's name, lower-case letters and digits)")
	f.StringVar(&fl.out, "out", "", "write to this file instead of stdout")
	return cmd
}

func (a *app) kindTypes(ctx context.Context, kind string, fl kindTypesFlags) error {
	switch fl.lang {
	case "go", "ts":
	case "":
		return usageError{fmt.Errorf("--lang is required: go or ts")}
	default:
		return usageError{fmt.Errorf("--lang %q: want go or ts", fl.lang)}
	}
	if fl.pkg != "" && (fl.lang != "go" || goPackageName(fl.pkg) != fl.pkg) {
		return usageError{fmt.Errorf("--package %q: want a Go package name (lower-case letters and digits) with --lang go", fl.pkg)}
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	var v *string
	if fl.version != "" {
		v = &fl.version
	}
	resp, err := KindSchemas(ctx, c.GQL, kind, v)
	if err != nil {
		return fmt.Errorf("get kind %s: %w", kind, apiError(err))
	}
	if resp.Kind == nil {
		return notFound("kind", kind)
	}
	k := resp.Kind
	in := kindTypesInput{Kind: k.Name, Version: k.Version}
	if k.SpecSchema != nil {
		in.Spec = *k.SpecSchema
	}
	if k.StatusSchema != nil {
		in.Status = *k.StatusSchema
	}
	var src string
	if fl.lang == "go" {
		pkg := fl.pkg
		if pkg == "" {
			pkg = goPackageName(k.Name)
		}
		src, err = generateGo(in, pkg)
	} else {
		src, err = generateTS(in)
	}
	if err != nil {
		return fmt.Errorf("kind %s %s: %w", k.Name, k.Version, err)
	}
	return a.writeOut(fl.out, src)
}

// writeOut writes src to path, or to stdout when path is empty.
func (a *app) writeOut(path, src string) error {
	if path == "" {
		_, err := io.WriteString(a.stdout(), src)
		return err
	}
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
