package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// editHeader opens the file edit hands the editor.
const editHeader = `# Edit the object below and save; close without saving (or save it unchanged)
# to cancel. Server-set fields (id, phase, generation, createdAt, ...) are
# ignored when the edit is applied, as conctl apply -f ignores them.
`

func (a *app) editCommand() *cobra.Command {
	var version string
	cmd := &cobra.Command{
		Use:   "edit TYPE NAME | TYPE/NAME",
		Short: "Edit an object in $EDITOR and apply the result (resources, kinds, providerconfigs, reactorbindings)",
		Long: `Print an object as YAML (exactly conctl get -o yaml) into a temporary file, open
it in $VISUAL, else $EDITOR, else vi, and apply what is saved, as conctl apply -f
would. Saving it unchanged, or emptying it, cancels. When the server rejects the
edit, the error is printed and the edited file is kept (its path is printed) so
the edit is not lost; re-apply it with conctl apply -f FILE.

A resource's spec and labels, a provider config's spec, data and is_default, a
binding's fields and a kind's whole manifest can be edited; a kind's live policy
is edited with conctl kind config. A kind with several versions is edited one
version at a time: name it with --version. The file is always YAML and edit
prints apply's lines, so -o json|yaml is refused.`,
		Example: `  conctl edit bom/acme
  conctl edit account acme-t0-account
  conctl edit kind route
  conctl edit kind vpc --version v2

  # Without a terminal: the editor is any command that changes the file it is given
  EDITOR='sed -i "s/latency_ms: 300/latency_ms: 250/"' conctl edit pc account/default`,
		Args:              rangeArgs(1, 2),
		ValidArgsFunction: a.completeTargets(typeResource, typeKind, typeProviderConfig, typeReactorBinding),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.noStructuredOutput("edit"); err != nil {
				return err
			}
			tg, err := a.resolveTarget(cmd.Context(), args, typeResource, typeKind, typeProviderConfig, typeReactorBinding)
			if err != nil {
				return err
			}
			if len(tg.names) != 1 {
				return usageError{fmt.Errorf("edit takes one object: TYPE NAME or TYPE/NAME")}
			}
			if version != "" && tg.t != typeKind {
				return usageError{fmt.Errorf("--version names a kind version: only edit kind takes it")}
			}
			return a.edit(cmd.Context(), tg, version)
		},
	}
	cmd.Flags().StringVar(&version, "version", "", "the kind version to edit (edit kind; default: the kind's only version)")
	return cmd
}

// fetchObject reads one object as get -o yaml prints it.
func (a *app) fetchObject(ctx context.Context, c *Conn, tg target, version string) (any, error) {
	name := tg.names[0]
	switch tg.t {
	case typeResource:
		refs, err := tg.resourceRefs("")
		if err != nil {
			return nil, err
		}
		resp, err := GetResource(ctx, c.GQL, refs[0].kind, refs[0].name)
		if err != nil {
			return nil, fmt.Errorf("get resource %s: %w", refs[0], apiError(err))
		}
		if resp.Resource == nil {
			return nil, notFound("resource", refs[0].String())
		}
		return resp.Resource, nil
	case typeKind:
		var v *string
		if version != "" {
			v = &version
		}
		resp, err := GetKind(ctx, c.GQL, name, v)
		if err != nil {
			return nil, fmt.Errorf("get kind %s: %w", name, apiError(err))
		}
		if resp.Kind == nil {
			return nil, notFound("kind", strings.TrimSpace(name+" "+version))
		}
		return resp.Kind, nil
	case typeProviderConfig:
		r, err := parseRef(name, "")
		if err != nil {
			return nil, err
		}
		resp, err := ListProviderConfigs(ctx, c.GQL, &r.kind, &r.name, 1, nil)
		if err != nil {
			return nil, fmt.Errorf("get providerconfig %s: %w", r, apiError(err))
		}
		if len(resp.ProviderConfigs.Items) == 0 {
			return nil, notFound("providerconfig", r.String())
		}
		return &resp.ProviderConfigs.Items[0].ProviderConfigRow, nil
	case typeReactorBinding:
		resp, err := ListReactorBindings(ctx, c.GQL, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("get reactorbinding %s: %w", name, apiError(err))
		}
		for i := range resp.ReactorBindings {
			if resp.ReactorBindings[i].Name == name {
				return &resp.ReactorBindings[i].ReactorBindingRow, nil
			}
		}
		return nil, notFound("reactorbinding", name)
	}
	return nil, usageError{fmt.Errorf("type %s cannot be edited", tg.t)}
}

func (a *app) edit(ctx context.Context, tg target, version string) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	obj, err := a.fetchObject(ctx, c, tg, version)
	if err != nil {
		return err
	}
	body, err := toYAML(obj)
	if err != nil {
		return err
	}
	original := append([]byte(editHeader), body...)
	dir, err := os.MkdirTemp("", "conctl-edit-")
	if err != nil {
		return fmt.Errorf("edit: create a temporary directory: %w", err)
	}
	path := filepath.Join(dir, strings.ReplaceAll(string(tg.t)+"-"+tg.names[0], "/", "-")+".yaml")
	if err := os.WriteFile(path, original, 0o600); err != nil {
		return fmt.Errorf("edit: write %s: %w", path, err)
	}
	keep := false
	defer func() {
		if !keep {
			_ = os.RemoveAll(dir)
		}
	}()
	if err := a.runEditor(ctx, path); err != nil {
		return err
	}
	edited, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("edit: read %s: %w", path, err)
	}
	if bytes.Equal(edited, original) || len(bytes.TrimSpace(stripComments(edited))) == 0 {
		fmt.Fprintln(a.stdout(), "Edit cancelled, no changes made.")
		return nil
	}
	if err := a.apply(ctx, applyFlags{files: []string{path}}); err != nil {
		keep = true
		return fmt.Errorf("%w\n(your edit is kept in %s: fix it and run conctl apply -f %s)", err, path, path)
	}
	return nil
}

// runEditor opens path in $VISUAL, else $EDITOR, else vi; the variable may
// carry arguments ("code --wait").
func (a *app) runEditor(ctx context.Context, path string) error {
	editor := a.env.Getenv("VISUAL")
	if editor == "" {
		editor = a.env.Getenv("EDITOR")
	}
	if editor == "" {
		editor = "vi"
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", editor+` "$1"`, "conctl-editor", path)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if f, ok := a.env.Stdin.(*os.File); ok {
		cmd.Stdin = f
	}
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("edit: the editor (%s) exited with status %d; nothing applied", editor, exit.ExitCode())
		}
		return fmt.Errorf("edit: run the editor (%s): %w", editor, err)
	}
	return nil
}

// stripComments drops the # comment lines (the header).
func stripComments(b []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}
