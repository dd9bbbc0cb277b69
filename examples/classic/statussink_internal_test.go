package classic

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker"
)

// reactReq is a delivery of a synced bom named name (the Resource carries
// the reactor's own kind, the Reaction the watched one).
func reactReq(name string, gen int64, cfg string) worker.Request {
	return reactReqOf("bom", name, gen, cfg, `{"ready":3}`)
}

func reactReqOf(watchKind, name string, gen int64, cfg, status string) worker.Request {
	return worker.Request{Stage: worker.StageReact, Reaction: "react",
		Resource: worker.Resource{Kind: KindStatusSink, Name: name, Status: json.RawMessage(status), Generation: gen},
		Config:   worker.EffectiveConfig{Name: "default", Spec: json.RawMessage(cfg)},
		React: &worker.Reaction{Transition: manifest.TransitionSynced, WatchKind: watchKind, Binding: "b", Generation: gen,
			DedupToken: "id:synced:" + name + ":b"}}
}

func sinkWith(t *testing.T, cfg string) *statusSink {
	t.Helper()
	s := newStatusSink(zerolog.Nop())
	s.OnConfig(worker.ProviderConfig{Kind: KindStatusSink, Name: "default", IsDefault: true, Spec: json.RawMessage(cfg)})
	t.Cleanup(func() { s.OnConfig(worker.ProviderConfig{}) })
	return s
}

func TestStatusSink_MemBucketGetsTheDocumentKeyedByGeneration(t *testing.T) {
	t.Parallel()
	cfg := `{"endpoint":"mem://","prefix":"boms/classic"}`
	s := sinkWith(t, cfg)
	require.True(t, s.Ready(), "a mem:// bucket opens")
	_, err := s.Work(context.Background(), reactReq("acme", 3, cfg))
	require.NoError(t, err)
	// A redelivery overwrites the same key.
	_, err = s.Work(context.Background(), reactReq("acme", 3, cfg))
	require.NoError(t, err)
	body, err := s.bucket.ReadAll(context.Background(), "boms/classic/bom/acme-3.json")
	require.NoError(t, err)
	var doc Document
	require.NoError(t, json.Unmarshal(body, &doc))
	require.Equal(t, Document{Kind: "bom", Name: "acme", Generation: 3, Transition: "synced", Binding: "b", DedupToken: "id:synced:acme:b",
		Status: json.RawMessage(`{"ready":3}`)}, normalize(t, doc))
	keys := 0
	it := s.bucket.List(nil)
	for {
		obj, err := it.Next(context.Background())
		if err != nil {
			break
		}
		require.Equal(t, "boms/classic/bom/acme-3.json", obj.Key)
		keys++
	}
	require.Equal(t, 1, keys, "one object per (name, generation)")
}

// TestStatusSink_OneNameInTwoKindsKeepsADocumentEach: a name is unique
// within its kind only, so the documents of a bom and a classicbom both
// named acme, at the same generation, are two objects, each with its own
// status. The key was <prefix>/<name>-<generation>.json: the second
// delivery overwrote the first.
func TestStatusSink_OneNameInTwoKindsKeepsADocumentEach(t *testing.T) {
	t.Parallel()
	cfg := `{"endpoint":"mem://","prefix":"boms"}`
	s := sinkWith(t, cfg)
	require.True(t, s.Ready())
	for _, kind := range []string{"bom", "classicbom"} {
		_, err := s.Work(t.Context(), reactReqOf(kind, "acme", 1, cfg, `{"of":"`+kind+`"}`))
		require.NoError(t, err)
	}
	got := map[string]string{}
	it := s.bucket.List(nil)
	for {
		obj, err := it.Next(t.Context())
		if err != nil {
			break
		}
		body, err := s.bucket.ReadAll(t.Context(), obj.Key)
		require.NoError(t, err)
		var doc Document
		require.NoError(t, json.Unmarshal(body, &doc))
		got[obj.Key] = doc.Kind + " " + string(normalize(t, doc).Status)
	}
	require.Equal(t, map[string]string{
		"boms/bom/acme-1.json":        `bom {"of":"bom"}`,
		"boms/classicbom/acme-1.json": `classicbom {"of":"classicbom"}`,
	}, got)

	for kind, want := range map[string]string{"": "names no watched kind", "a/b": `kind "a/b"`, "..": `kind ".."`} {
		_, err := s.Work(t.Context(), reactReqOf(kind, "acme", 2, cfg, `{}`))
		require.True(t, worker.IsTerminal(err), "watched kind %q: %v", kind, err)
		require.ErrorContains(t, err, want)
	}
}

func normalize(t *testing.T, d Document) Document {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(d.Status, &v))
	d.Status, _ = json.Marshal(v)
	return d
}

func TestStatusSink_FileEndpointWritesInsideAndRefusesTraversal(t *testing.T) {
	t.Parallel()
	outer := t.TempDir()
	dir := filepath.Join(outer, "sink")
	good := `{"endpoint":"file://` + dir + `?create_dir=true&metadata=skip","prefix":"boms"}`
	s := sinkWith(t, good)
	require.True(t, s.Ready(), "create_dir makes the directory")
	_, err := s.Work(context.Background(), reactReq("acme", 1, good))
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, "boms", "bom", "acme-1.json"))
	require.NoError(t, err)
	require.Contains(t, string(b), `"dedup_token"`)

	for _, prefix := range []string{"../escape", "boms/../../escape", "/..", "a//b", `..\escape`, "./x"} {
		bad := `{"endpoint":"file://` + dir + `?metadata=skip","prefix":` + strconvQuote(prefix) + `}`
		refused := sinkWith(t, bad)
		require.False(t, refused.Ready(), "prefix %q leaves the kind unready", prefix)
		_, err := s.Work(context.Background(), reactReq("acme", 2, bad))
		require.Error(t, err, prefix)
		require.True(t, worker.IsTerminal(err), "prefix %q is a terminal failure: %v", prefix, err)
		require.Contains(t, err.Error(), "not allowed", prefix)
	}
	_, err = s.Work(context.Background(), reactReq("a/../../x", 2, good))
	require.True(t, worker.IsTerminal(err), "a name with a / is refused: %v", err)
	entries, err := os.ReadDir(outer)
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing was written outside the endpoint: %v", entries)
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestStatusSink_UnusableConfigKeepsTheKindUnready(t *testing.T) {
	t.Parallel()
	for _, cfg := range []string{``, `null`, `{"endpoint":"ftp://x"}`, `{"endpoint":"file://"}`, `{"endpoint":"::"}`, `{"endpoint":"s3://"}`} {
		s := sinkWith(t, cfg)
		require.False(t, s.Ready(), "config %q", cfg)
	}
}

// TestStatusSink_S3UploadsSignedWithSigV4 points an s3:// endpoint at a
// local server standing in for S3 and checks the upload is a PUT of the
// key, signed by the AWS SDK with the configured credentials.
func TestStatusSink_S3UploadsSignedWithSigV4(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	var (
		mu   sync.Mutex
		puts []string
		auth []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Method == http.MethodPut {
			puts = append(puts, r.URL.Path)
			auth = append(auth, r.Header.Get("Authorization"))
		}
		w.Header().Set("ETag", `"etag"`)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	cfg := `{"endpoint":"s3://bucket?region=eu-west-1&endpoint=` + srv.URL + `&use_path_style=true","prefix":"boms"}`
	s := sinkWith(t, cfg)
	require.True(t, s.Ready())
	_, err := s.Work(context.Background(), reactReq("acme", 4, cfg))
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"/bucket/boms/bom/acme-4.json"}, puts)
	require.True(t, strings.HasPrefix(auth[0], "AWS4-HMAC-SHA256 Credential=AKIDTEST/"), auth[0])
	require.Contains(t, auth[0], "/eu-west-1/s3/aws4_request")
}

// A config pushed while an upload is in flight — the same one again, as
// every new broker session pushes it, or a new endpoint — never closes the
// bucket under the upload: the upload completes, and the bucket it used is
// closed once it is done.
func TestStatusSink_AConfigPushDoesNotCloseTheBucketUnderAnUpload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := `{"endpoint":"file://` + dir + `?create_dir=true&metadata=skip","prefix":"boms"}`
	s := sinkWith(t, cfg)
	require.True(t, s.Ready())
	push := func(cfg string) {
		s.OnConfig(worker.ProviderConfig{Kind: KindStatusSink, Name: "default", IsDefault: true, Spec: json.RawMessage(cfg)})
	}
	c, err := parseSinkConfig(json.RawMessage(cfg))
	require.NoError(t, err)
	for _, step := range []struct{ name, next string }{
		{"the same config again", cfg},
		{"another endpoint", `{"endpoint":"mem://","prefix":"boms"}`},
	} {
		name, next := step.name, step.next
		// Work's steps, with the push between taking the bucket and writing.
		b, release, err := s.bucketFor(t.Context(), c.Endpoint)
		require.NoError(t, err)
		push(next)
		require.NoError(t, b.WriteAll(t.Context(), "boms/x.json", []byte(`{}`), nil), "%s: the upload in flight completes", name)
		release()
		push(cfg)
	}
	_, err = os.Stat(filepath.Join(dir, "boms", "x.json"))
	require.NoError(t, err)
}
