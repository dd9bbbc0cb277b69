package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// defaultManifestVersion is the version the server gives a manifest that
// names none (core/manifest.DefaultVersion).
const defaultManifestVersion = "v1"

// The typed documents (snake_case JSON, as in examples/classic/testfixtures).
type (
	manifestHead struct {
		Kind    string `json:"kind"`
		Version string `json:"version"`
	}
	providerConfigDoc struct {
		Kind      string          `json:"kind"`
		Name      string          `json:"name"`
		IsDefault bool            `json:"is_default"`
		Spec      json.RawMessage `json:"spec"`
		Data      json.RawMessage `json:"data,omitempty"`
	}
	reactorBindingDoc struct {
		Name       string          `json:"name"`
		WatchKind  string          `json:"watch_kind"`
		Transition string          `json:"transition"`
		Reactor    string          `json:"reactor"`
		LabelMatch json.RawMessage `json:"label_match,omitempty"`
		Enabled    *bool           `json:"enabled,omitempty"`
	}
	resourceDoc struct {
		Kind              string          `json:"kind"`
		Name              string          `json:"name"`
		Version           string          `json:"version,omitempty"`
		Labels            json.RawMessage `json:"labels,omitempty"`
		Spec              json.RawMessage `json:"spec"`
		ProviderConfigRef string          `json:"provider_config_ref,omitempty"`
	}
)

// typed is a document decoded for its type.
type typed struct {
	Document
	manifest manifestHead
	pc       providerConfigDoc
	rb       reactorBindingDoc
	res      resourceDoc
}

// name is how apply prints the object: resource/bom/acme.
func (t typed) name() string {
	switch t.Type {
	case DocManifest:
		return "manifest/" + t.manifest.Kind
	case DocProviderConfig:
		return "providerconfig/" + t.pc.Kind + "/" + t.pc.Name
	case DocReactorBinding:
		return "reactorbinding/" + t.rb.Name
	}
	return "resource/" + t.res.Kind + "/" + t.res.Name
}

// decodeDocument checks a document's keys and required fields.
func decodeDocument(d Document) (typed, error) {
	t := typed{Document: d}
	var err error
	missing := func(fields ...string) error {
		return fmt.Errorf("%s: a %s document needs %s", d.Source, d.Type, strings.Join(fields, ", "))
	}
	switch d.Type {
	case DocManifest:
		// The server validates the manifest itself (the legality lattice).
		if err = json.Unmarshal(d.Raw, &t.manifest); err == nil && t.manifest.Kind == "" {
			return t, missing("kind")
		}
	case DocProviderConfig:
		if err = decodeStrict(d.Raw, &t.pc); err == nil && (t.pc.Kind == "" || t.pc.Name == "" || isNull(t.pc.Spec)) {
			return t, missing("kind", "name", "spec")
		}
	case DocReactorBinding:
		if err = decodeStrict(d.Raw, &t.rb); err == nil &&
			(t.rb.Name == "" || t.rb.WatchKind == "" || t.rb.Transition == "" || t.rb.Reactor == "") {
			return t, missing("name", "watch_kind", "transition", "reactor")
		}
		if err == nil && !contains(AllTransition, Transition(strings.ToUpper(t.rb.Transition))) {
			return t, fmt.Errorf("%s: unknown transition %q (one of created, synced, degraded, failed, deleted)",
				d.Source, t.rb.Transition)
		}
	case DocResource:
		if err = decodeStrict(d.Raw, &t.res); err == nil && (t.res.Kind == "" || t.res.Name == "" || isNull(t.res.Spec)) {
			return t, missing("kind", "name", "spec")
		}
	default:
		return t, fmt.Errorf("%s: unknown document type %q", d.Source, d.Type)
	}
	if err != nil {
		return t, fmt.Errorf("%s: not a valid %s document: %w", d.Source, d.Type, err)
	}
	if err := checkShape(t); err != nil {
		return t, fmt.Errorf("%s: not a valid %s document: %w", d.Source, d.Type, err)
	}
	return t, nil
}

// checkShape checks what the server would refuse by its shape alone, so a
// multi-document apply is refused before it writes anything: a spec is an
// object, labels and label_match an object of strings.
func checkShape(t typed) error {
	switch t.Type {
	case DocProviderConfig:
		return jsonObjectField("spec", t.pc.Spec)
	case DocReactorBinding:
		return stringMapField("label_match", t.rb.LabelMatch)
	case DocResource:
		return errors.Join(jsonObjectField("spec", t.res.Spec), stringMapField("labels", t.res.Labels))
	}
	return nil
}

// jsonObjectField: raw is a JSON object.
func jsonObjectField(field string, raw json.RawMessage) error {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return fmt.Errorf("%s must be an object, not %s", field, jsonKind(t))
	}
	return nil
}

// stringMapField: raw is absent, null or an object of strings.
func stringMapField(field string, raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("%s must be an object of strings (key: value), not %s", field, jsonKind(bytes.TrimSpace(raw)))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := m[k].(string); !ok {
			return fmt.Errorf("%s: the value of %q must be a string, not %s", field, k, jsonKind(mustJSON(m[k])))
		}
	}
	return nil
}

// jsonKind names a JSON value's type for an error.
func jsonKind(raw []byte) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// applyFlags are apply's flags.
type applyFlags struct {
	files     []string
	typ       string
	recursive bool
	wait      bool
	timeout   time.Duration
	// acceptBreaking applies manifest changes the stored resources fail.
	acceptBreaking bool
	dryRun         bool
}

func (a *app) applyCommand() *cobra.Command {
	var fl applyFlags
	cmd := &cobra.Command{
		Use:   "apply -f FILE|DIR|- [--type TYPE] [--wait [--timeout D]] [--dry-run]",
		Short: "Create or update manifests, provider configs, reactor bindings and resources from files",
		Long: `Apply the JSON or YAML documents of files, directories and stdin (-f -). A file
may hold several documents (concatenated JSON values, a JSON array, or YAML
documents separated by ---). Each document is a kind manifest, a providerconfig,
a reactor binding or a resource as a snake_case JSON document; its type is
inferred from its keys — a resource is kind, name and spec (with labels,
version, provider_config_ref), a providerconfig says is_default, a binding
watch_kind, a manifest reactions — or, when two types still fit, from the file
naming convention (<kind>.kind.json, providerconfig-*, reactor-binding-*,
resource-*), or forced with --type. What conctl get -o json|yaml prints (one
object or a list) applies too: the server-set fields (id, phase, generation,
createdAt, ...) are ignored, so it applies back unchanged.

Every document is read and checked before anything is written: its shape by
conctl (a spec is an object, labels an object of strings, ...), and by a
server dry run every document whose check does not hang on another document of
the same apply (a resource of a kind whose manifest or providerconfigs the same
files apply is checked only when it is applied). They are then applied in
dependency order (manifests, providerconfigs, bindings, resources), stopping
at the first the server rejects. Each prints created, configured or unchanged;
a resource applied at another version of its kind prints migrated (it moves to
that version live and is reconciled by its workers). -o json|yaml prints the
outcomes as one list, {"items": [{"object": "resource/bom/acme", "outcome":
"created"}, ...]} (on a failure, those applied before it).

Re-applying a kind manifest whose spec_schema would reject stored resources of
that version, or drops a required field they carry, is refused with the
resources and fields named: publish the change as a new version, or pass
--accept-breaking to accept it.

With --wait, conctl follows every applied resource's whole subtree over the
subtreeProgress subscription, with a live bar of READY over total (every level
below the root) and failures named as they happen. It exits 0 once every
resource is READY, and non-zero as soon as one FAILS terminally or settles
DEGRADED, or when --timeout passes. A restart of the server or a dropped
connection does not end the wait, from its first read on: conctl subscribes
anew and re-reads what it follows (every 3 s as well), until --timeout; a read
the server answers with an error ends it. (With -o json|yaml the list comes
first and the closing READY lines go to stderr.)

With --dry-run, every document is validated by the server exactly as a real
apply (the same errors) and nothing is written; each prints what it would do.
conctl diff -f also prints a resource's spec and labels changes.`,
		Example: `  # A directory of fixtures (every *.json, *.yaml and *.yml, in dependency order)
  conctl apply -f examples/classic/testfixtures

  # One resource from stdin (kind, name and spec: a resource)
  echo '{"kind":"bom","name":"small","spec":{"teams":1}}' | conctl apply -f -

  # A provider config beside the kind's default (is_default says what it is);
  # a resource picks it with provider_config_ref
  echo '{"kind":"vpc","name":"staging","is_default":false,"spec":{"latency_ms":100}}' | conctl apply -f -

  # Print a resource, change it, apply it back
  conctl get bom acme -o yaml > acme.yaml
  conctl apply -f acme.yaml

  # Apply a BOM and wait up to 10 minutes for its subtree to be READY
  conctl apply -f examples/classic/testfixtures/resource-bom-sample.json --wait --timeout 10m`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return a.apply(cmd.Context(), fl) },
	}
	f := cmd.Flags()
	f.StringArrayVarP(&fl.files, "filename", "f", nil, "a file, a directory or - (stdin); repeatable")
	f.StringVar(&fl.typ, "type", "", "force the document type: manifest, providerconfig, reactorbinding or resource")
	f.BoolVarP(&fl.recursive, "recursive", "R", false, "descend into subdirectories of a -f directory")
	f.BoolVar(&fl.wait, "wait", false, "follow each applied resource until it is READY (or fails)")
	f.DurationVar(&fl.timeout, "timeout", 5*time.Minute, "how long --wait waits (a positive duration)")
	f.BoolVar(&fl.acceptBreaking, "accept-breaking", false,
		"apply kind manifests even when their new spec_schema breaks stored resources")
	f.BoolVar(&fl.dryRun, "dry-run", false, "validate every document fully on the server and print what would happen; write nothing")
	_ = cmd.MarkFlagFilename("filename", "json", "yaml", "yml")
	_ = cmd.RegisterFlagCompletionFunc("type", cobra.FixedCompletions(
		[]string{"manifest", "providerconfig", "reactorbinding", "resource"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// apply reads and checks every document before writing any, applies them in
// dependency order and, with --wait, follows each applied resource until it
// is READY.
func (a *app) apply(ctx context.Context, fl applyFlags) error {
	if err := checkTimeout(fl.wait, fl.timeout); err != nil {
		return err
	}
	if fl.dryRun {
		if fl.wait {
			return usageError{fmt.Errorf("--dry-run writes nothing: there is nothing to --wait for")}
		}
		return a.diff(ctx, fl, false)
	}
	checked, err := a.checkedDocuments(fl)
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	if err := preflight(ctx, c, checked, fl.acceptBreaking); err != nil {
		return err
	}
	var roots []ref
	for _, t := range checked {
		outcome, err := a.applyOne(ctx, c, t, fl.acceptBreaking)
		if err != nil {
			return fmt.Errorf("apply %s (%s): %w", t.name(), t.Source, err)
		}
		a.report(actionResult{Object: t.name(), Outcome: outcome})
		if t.Type == DocResource {
			roots = append(roots, ref{kind: t.res.Kind, name: t.res.Name})
		}
	}
	if !fl.wait {
		return nil
	}
	if err := a.flushResults(); err != nil { // what was applied, before the wait
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, fl.timeout)
	defer cancel()
	for _, r := range roots {
		if err := a.waitReady(ctx, c, r, fl.timeout); err != nil {
			return err
		}
	}
	return nil
}

// preflight dry-runs, before anything is written, every document whose
// outcome does not hang on an earlier document of the same apply, so that
// one the server refuses stops the apply while nothing is written yet. A
// document is left to the apply itself when this apply also writes what
// the server checks it against: the manifest of its kind (or, for a
// binding, of its watched or reactor kind); for a resource, a providerconfig
// of its kind; for a providerconfig, another of its kind (one default per
// kind); or the same object earlier.
func preflight(ctx context.Context, c *Conn, checked []typed, acceptBreaking bool) error {
	manifests := map[string]bool{}
	configs := map[string]int{}
	for _, t := range checked {
		switch t.Type {
		case DocManifest:
			manifests[t.manifest.Kind] = true
		case DocProviderConfig:
			configs[t.pc.Kind]++
		}
	}
	seen := map[string]bool{}
	for _, t := range checked {
		name := t.name()
		var depends bool
		switch t.Type {
		case DocProviderConfig:
			depends = manifests[t.pc.Kind] || configs[t.pc.Kind] > 1
		case DocReactorBinding:
			depends = manifests[t.rb.WatchKind] || manifests[t.rb.Reactor]
		case DocResource:
			depends = manifests[t.res.Kind] || configs[t.res.Kind] > 0
		}
		if depends || seen[name] {
			continue
		}
		seen[name] = true
		if _, _, err := dryRunOne(ctx, c, t, acceptBreaking); err != nil {
			return fmt.Errorf("apply %s (%s): %w", name, t.Source, err)
		}
	}
	return nil
}

// checkedDocuments reads the -f documents and decodes each against its type.
func (a *app) checkedDocuments(fl applyFlags) ([]typed, error) {
	var forced DocType
	if fl.typ != "" {
		t, err := ParseDocType(fl.typ)
		if err != nil {
			return nil, usageError{err}
		}
		forced = t
	}
	docs, err := ReadDocuments(fl.files, a.env.Stdin, forced, fl.recursive)
	if err != nil {
		return nil, err
	}
	checked := make([]typed, 0, len(docs))
	for _, d := range docs {
		t, err := decodeDocument(d)
		if err != nil {
			return nil, err
		}
		checked = append(checked, t)
	}
	return checked, nil
}

// The apply outcomes.
const (
	outcomeCreated    = "created"
	outcomeConfigured = "configured"
	outcomeUnchanged  = "unchanged"
	outcomeMigrated   = "migrated"
)

// applyOne writes one document and reports what changed, comparing the
// object before and after (the server writes nothing for an identical
// document, so its change markers stay put).
func (a *app) applyOne(ctx context.Context, c *Conn, t typed, acceptBreaking bool) (string, error) {
	switch t.Type {
	case DocManifest:
		return applyManifest(ctx, c, t, acceptBreaking)
	case DocProviderConfig:
		return applyProviderConfig(ctx, c, t.pc)
	case DocReactorBinding:
		return applyReactorBinding(ctx, c, t.rb)
	case DocResource:
		return applyResource(ctx, c, t.res)
	}
	return "", fmt.Errorf("unknown document type %q", t.Type)
}

func applyManifest(ctx context.Context, c *Conn, t typed, acceptBreaking bool) (string, error) {
	version := t.manifest.Version
	if version == "" {
		version = defaultManifestVersion
	}
	before, err := GetKind(ctx, c.GQL, t.manifest.Kind, &version)
	if err != nil {
		return "", apiError(err)
	}
	var accept *bool
	if acceptBreaking {
		accept = &acceptBreaking
	}
	after, err := ApplyKindManifest(ctx, c.GQL, t.Raw, accept)
	if err != nil {
		return "", apiError(err)
	}
	switch {
	case before.Kind == nil:
		return outcomeCreated, nil
	case before.Kind.ManifestGeneration != after.ApplyKindManifest.ManifestGeneration:
		return outcomeConfigured, nil
	}
	return outcomeUnchanged, nil
}

func applyProviderConfig(ctx context.Context, c *Conn, d providerConfigDoc) (string, error) {
	before, err := ListProviderConfigs(ctx, c.GQL, &d.Kind, &d.Name, 1, nil)
	if err != nil {
		return "", apiError(err)
	}
	in := d.input()
	after, err := ApplyProviderConfig(ctx, c.GQL, in)
	if err != nil {
		return "", apiError(err)
	}
	items := before.ProviderConfigs.Items
	switch {
	case len(items) == 0:
		return outcomeCreated, nil
	case !items[0].UpdatedAt.Equal(after.ApplyProviderConfig.UpdatedAt):
		return outcomeConfigured, nil
	}
	return outcomeUnchanged, nil
}

func applyReactorBinding(ctx context.Context, c *Conn, d reactorBindingDoc) (string, error) {
	before, err := ListReactorBindings(ctx, c.GQL, &d.WatchKind, nil)
	if err != nil {
		return "", apiError(err)
	}
	in := d.input()
	after, err := ApplyReactorBinding(ctx, c.GQL, in)
	if err != nil {
		return "", apiError(err)
	}
	for _, b := range before.ReactorBindings {
		if b.Name != d.Name {
			continue
		}
		if b.UpdatedAt.Equal(after.ApplyReactorBinding.UpdatedAt) {
			return outcomeUnchanged, nil
		}
		return outcomeConfigured, nil
	}
	// Not listed under its watch kind before: new, or moved from another
	// watch kind (an update the server reports with a fresh updatedAt).
	if after.ApplyReactorBinding.CreatedAt.Equal(after.ApplyReactorBinding.UpdatedAt) {
		return outcomeCreated, nil
	}
	return outcomeConfigured, nil
}

// input is the document as the API's ResourceInput (unset fields left nil).
func (d resourceDoc) input() ResourceInput {
	in := ResourceInput{Kind: d.Kind, Name: d.Name, Spec: d.Spec}
	if d.Version != "" {
		v := d.Version
		in.Version = &v
	}
	if !isNull(d.Labels) {
		l := d.Labels
		in.Labels = &l
	}
	if d.ProviderConfigRef != "" {
		p := d.ProviderConfigRef
		in.ProviderConfigRef = &p
	}
	return in
}

// input is the document as the API's ProviderConfigInput.
func (d providerConfigDoc) input() ProviderConfigInput {
	in := ProviderConfigInput{Kind: d.Kind, Name: d.Name, IsDefault: d.IsDefault, Spec: d.Spec}
	if !isNull(d.Data) {
		data := d.Data
		in.Data = &data
	}
	return in
}

// input is the document as the API's ReactorBindingInput (enabled unless
// the document says otherwise).
func (d reactorBindingDoc) input() ReactorBindingInput {
	enabled := true
	if d.Enabled != nil {
		enabled = *d.Enabled
	}
	in := ReactorBindingInput{Name: d.Name, WatchKind: d.WatchKind, Transition: Transition(strings.ToUpper(d.Transition)),
		Reactor: d.Reactor, Enabled: &enabled}
	if !isNull(d.LabelMatch) {
		lm := d.LabelMatch
		in.LabelMatch = &lm
	}
	return in
}

func applyResource(ctx context.Context, c *Conn, d resourceDoc) (string, error) {
	before, err := GetResource(ctx, c.GQL, d.Kind, d.Name)
	if err != nil {
		return "", apiError(err)
	}
	after, err := ApplyResource(ctx, c.GQL, d.input())
	if err != nil {
		return "", apiError(err)
	}
	b, r := before.Resource, after.ApplyResource
	switch {
	case b == nil:
		return outcomeCreated, nil
	case b.Version != r.Version:
		return fmt.Sprintf("%s (%s → %s)", outcomeMigrated, b.Version, r.Version), nil
	case b.Generation != r.Generation || !jsonEqual(b.Labels, r.Labels):
		return outcomeConfigured, nil
	}
	return outcomeUnchanged, nil
}

// jsonEqual compares two JSON values structurally.
func jsonEqual(x, y json.RawMessage) bool {
	var a, b any
	if json.Unmarshal(x, &a) != nil || json.Unmarshal(y, &b) != nil {
		return bytes.Equal(x, y)
	}
	xa, err1 := json.Marshal(a)
	yb, err2 := json.Marshal(b)
	if err := errors.Join(err1, err2); err != nil {
		return false
	}
	return bytes.Equal(xa, yb)
}
