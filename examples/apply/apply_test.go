package apply_test

import (
	"context"
	"encoding/json"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/examples/apply"
)

type recorder struct{ got []string }

func (r *recorder) ApplyManifest(_ context.Context, raw json.RawMessage) error {
	var m struct{ Kind string }
	_ = json.Unmarshal(raw, &m)
	r.got = append(r.got, "manifest/"+m.Kind)
	return nil
}
func (r *recorder) ApplyProviderConfig(_ context.Context, pc apply.ProviderConfig) error {
	r.got = append(r.got, "providerconfig/"+pc.Kind+"/"+pc.Name)
	return nil
}
func (r *recorder) ApplyReactorBinding(_ context.Context, b apply.ReactorBinding) error {
	r.got = append(r.got, "binding/"+b.Name+"/"+b.WatchKind+"/"+b.Transition)
	return nil
}
func (r *recorder) ApplyResource(_ context.Context, res apply.Resource) error {
	r.got = append(r.got, "resource/"+res.Kind+"/"+res.Name+"/"+res.ProviderConfigRef)
	return nil
}

func TestLoad_AppliesInDependencyOrder(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"fx/resource-a.json":              {Data: []byte(`{"kind":"vpc","name":"a","spec":{},"provider_config_ref":"fast"}`)},
		"fx/reactor-binding-x.json":       {Data: []byte(`{"name":"x","watch_kind":"vpc","transition":"synced","reactor":"sink"}`)},
		"fx/providerconfig-vpc.json":      {Data: []byte(`{"kind":"vpc","name":"default","is_default":true,"spec":{}}`)},
		"fx/vpc.kind.json":                {Data: []byte(`{"kind":"vpc","reactions":[]}`)},
		"fx/sink.kind.json":               {Data: []byte(`{"kind":"sink","reactions":[]}`)},
		"fx/README.md":                    {Data: []byte(`not a document`)},
		"fx/notes.json":                   {Data: []byte(`{"ignored":true}`)},
		"fx/sub/providerconfig-skip.json": {Data: []byte(`{}`)},
	}
	docs, err := apply.Load(fsys, "fx", nil)
	require.NoError(t, err)
	rec := &recorder{}
	require.NoError(t, apply.All(context.Background(), rec, docs))
	want := []string{"manifest/sink", "manifest/vpc", "providerconfig/vpc/default", "binding/x/vpc/synced", "resource/vpc/a/fast"}
	if diff := cmp.Diff(want, rec.got); diff != "" {
		t.Errorf("apply order (-want +got):\n%s", diff)
	}
}

func TestOne_RejectsMisspeltKeys(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		doc    apply.Document
	}{
		"camelCase":  {reason: "documents are snake_case", doc: apply.Document{Type: apply.TypeProviderConfig, Path: "p.json", Raw: json.RawMessage(`{"kind":"vpc","name":"d","isDefault":true,"spec":{}}`)}},
		"typo":       {reason: "a typo is not silently dropped", doc: apply.Document{Type: apply.TypeReactorBinding, Path: "b.json", Raw: json.RawMessage(`{"name":"x","watchkind":"vpc"}`)}},
		"wrong-type": {reason: "a value of the wrong type fails", doc: apply.Document{Type: apply.TypeResource, Path: "r.json", Raw: json.RawMessage(`{"kind":"vpc","name":"a","labels":[]}`)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := apply.One(context.Background(), &recorder{}, tc.doc)
			require.Error(t, err, tc.reason)
			require.Contains(t, err.Error(), tc.doc.Path, "the error names the file")
		})
	}
}
