package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/api"
	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/db/pgtest"
	"github.com/converge-run/converge/resolvers"
)

// A mutation's response, its nested fields included, is read from the
// primary: here the read pool is a replica that never catches up (another
// database), and setKindHistoryLimit still answers with the limit it set,
// rollbackResource with the event it recorded.
func TestReadYourWrites_SetKindHistoryLimitAnswersFromThePrimary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, err := pgxpool.New(ctx, pgtest.URL(t))
	require.NoError(t, err)
	t.Cleanup(primary.Close)
	lagging, err := pgxpool.New(ctx, pgtest.URL(t))
	require.NoError(t, err)
	t.Cleanup(lagging.Close)
	st := store.New(primary, lagging)
	_, _, err = st.ApplyManifest(ctx, []byte(`{"kind":"vpc","reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`))
	require.NoError(t, err)
	log := zerolog.Nop()
	hub := live.NewHub(notify.NewListener(primary, log), primary, log)
	srv := httptest.NewServer(api.NewHandler(api.Deps{Schema: resolvers.NewSchema(resolvers.Deps{Store: st, Hub: hub}), Log: log}))
	t.Cleanup(srv.Close)

	post := func(q string) string {
		resp, err := http.Post(srv.URL+"/graphql", "application/json", strings.NewReader(q))
		require.NoError(t, err)
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		return buf.String()
	}
	require.JSONEq(t, `{"data":{"setKindHistoryLimit":{"name":"vpc","historyLimit":5}}}`,
		post(`{"query":"mutation { setKindHistoryLimit(kind: \"vpc\", version: \"v1\", historyLimit: 5) { name historyLimit } }"}`))

	for _, spec := range []string{`{"n":1}`, `{"n":2}`} {
		_, _, err := st.ApplyResource(ctx, store.ApplyResourceInput{Kind: "vpc", Name: "a", Spec: json.RawMessage(spec)})
		require.NoError(t, err)
	}
	require.JSONEq(t, `{"data":{"rollbackResource":{"generation":3,"history":{"items":[{"reason":"RolledBack"}]}}}}`,
		post(`{"query":"mutation { rollbackResource(kind: \"vpc\", name: \"a\", toGeneration: 1) { generation history(first: 1) { items { reason } } } }"}`))
}
