package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func (a *app) diffCommand() *cobra.Command {
	var fl applyFlags
	cmd := &cobra.Command{
		Use:   "diff -f FILE|DIR|- [--type TYPE]",
		Short: "Show what apply would change, without writing anything",
		Long: `Dry-run the documents apply -f would apply and show what each would do: every
document is validated fully by the server, exactly as a real apply (the same
errors), and nothing is written. A resource prints its outcome and the spec
and labels changes against the stored object ("- path: before" and
"+ path: after" lines); a manifest, providerconfig or reactor binding prints
its outcome. Each document is checked against what is stored now: a resource
of a kind the same files declare but that is not applied yet fails as
unknown_kind. Exits 0 when every document validates. -o json|yaml prints one
list {"items": [{"object", "outcome", "dryRun": true, "changes": [...]}]}.`,
		Example: `  # What applying the demo's documents again would do
  conctl diff -f examples/classic/testfixtures

  # A change to a stored BOM, shown before it is made
  conctl get bom acme -o yaml | sed 's/teams: 3/teams: 4/' | conctl diff -f -`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return a.diff(cmd.Context(), fl, true) },
	}
	f := cmd.Flags()
	f.StringArrayVarP(&fl.files, "filename", "f", nil, "a file, a directory or - (stdin); repeatable")
	f.StringVar(&fl.typ, "type", "", "force the document type: manifest, providerconfig, reactorbinding or resource")
	f.BoolVarP(&fl.recursive, "recursive", "R", false, "descend into subdirectories of a -f directory")
	_ = cmd.MarkFlagFilename("filename", "json", "yaml", "yml")
	return cmd
}

// diff dry-runs every document in dependency order, printing each outcome
// and, with changes, a resource's spec and labels changes.
func (a *app) diff(ctx context.Context, fl applyFlags, changes bool) error {
	checked, err := a.checkedDocuments(fl)
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	for _, t := range checked {
		outcome, cs, err := dryRunOne(ctx, c, t, fl.acceptBreaking)
		if err != nil {
			return fmt.Errorf("dry run %s (%s): %w", t.name(), t.Source, err)
		}
		r := actionResult{Object: t.name(), Outcome: outcome, DryRun: true}
		if changes {
			r.Changes = cs
		}
		a.report(r)
	}
	return nil
}

// dryRunOne validates one document with the apply mutation's dry run and
// returns its outcome and, for a resource, its change lines.
func dryRunOne(ctx context.Context, c *Conn, t typed, acceptBreaking bool) (string, []string, error) {
	switch t.Type {
	case DocManifest:
		return dryRunManifest(ctx, c, t, acceptBreaking)
	case DocProviderConfig:
		return dryRunProviderConfig(ctx, c, t.pc)
	case DocReactorBinding:
		return dryRunReactorBinding(ctx, c, t.rb)
	case DocResource:
		return dryRunResource(ctx, c, t.res)
	}
	return "", nil, fmt.Errorf("unknown document type %q", t.Type)
}

func dryRunManifest(ctx context.Context, c *Conn, t typed, acceptBreaking bool) (string, []string, error) {
	version := t.manifest.Version
	if version == "" {
		version = defaultManifestVersion
	}
	before, err := GetKind(ctx, c.GQL, t.manifest.Kind, &version)
	if err != nil {
		return "", nil, apiError(err)
	}
	var accept *bool
	if acceptBreaking {
		accept = &acceptBreaking
	}
	after, err := DryRunKindManifest(ctx, c.GQL, t.Raw, accept)
	if err != nil {
		return "", nil, apiError(err)
	}
	switch {
	case before.Kind == nil:
		return outcomeCreated, nil, nil
	case before.Kind.ManifestGeneration != after.ApplyKindManifest.ManifestGeneration:
		return outcomeConfigured, nil, nil
	}
	return outcomeUnchanged, nil, nil
}

func dryRunProviderConfig(ctx context.Context, c *Conn, d providerConfigDoc) (string, []string, error) {
	before, err := ListProviderConfigs(ctx, c.GQL, &d.Kind, &d.Name, 1, nil)
	if err != nil {
		return "", nil, apiError(err)
	}
	in := d.input()
	after, err := DryRunProviderConfig(ctx, c.GQL, in)
	if err != nil {
		return "", nil, apiError(err)
	}
	items := before.ProviderConfigs.Items
	switch {
	case len(items) == 0:
		return outcomeCreated, nil, nil
	case !items[0].UpdatedAt.Equal(after.ApplyProviderConfig.UpdatedAt):
		return outcomeConfigured, nil, nil
	}
	return outcomeUnchanged, nil, nil
}

func dryRunReactorBinding(ctx context.Context, c *Conn, d reactorBindingDoc) (string, []string, error) {
	before, err := ListReactorBindings(ctx, c.GQL, &d.WatchKind, nil)
	if err != nil {
		return "", nil, apiError(err)
	}
	in := d.input()
	after, err := DryRunReactorBinding(ctx, c.GQL, in)
	if err != nil {
		return "", nil, apiError(err)
	}
	for _, b := range before.ReactorBindings {
		if b.Name == d.Name {
			if b.UpdatedAt.Equal(after.ApplyReactorBinding.UpdatedAt) {
				return outcomeUnchanged, nil, nil
			}
			return outcomeConfigured, nil, nil
		}
	}
	if after.ApplyReactorBinding.CreatedAt.Equal(after.ApplyReactorBinding.UpdatedAt) {
		return outcomeCreated, nil, nil
	}
	return outcomeConfigured, nil, nil
}

func dryRunResource(ctx context.Context, c *Conn, d resourceDoc) (string, []string, error) {
	resp, err := PlanResource(ctx, c.GQL, d.input())
	if err != nil {
		return "", nil, apiError(err)
	}
	p := resp.PlanResource
	var lines []string
	if p.Current != nil && p.Current.Generation != p.Generation {
		lines = append(lines, fmt.Sprintf("generation %d -> %d", p.Current.Generation, p.Generation))
	}
	for _, ch := range p.SpecChanges {
		lines = append(lines, changeLines("spec", ch.JSONChangeRow)...)
	}
	for _, ch := range p.LabelsChanges {
		lines = append(lines, changeLines("labels", ch.JSONChangeRow)...)
	}
	return strings.ToLower(string(p.Outcome)), lines, nil
}

func changeLines(what string, c JSONChangeRow) []string {
	var out []string
	side := func(sign string, v *json.RawMessage) {
		if v != nil {
			out = append(out, fmt.Sprintf("%s %s%s: %s", sign, what, c.Path, string(*v)))
		}
	}
	side("-", c.Before)
	side("+", c.After)
	return out
}
