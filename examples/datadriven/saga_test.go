package datadriven_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/examples/apply"
	"github.com/converge-run/converge/examples/datadriven"
	"github.com/converge-run/converge/resolvers"
)

// TestJobSaga_TerraformSyncedAppliesTheJobOnceOverGraphQL: a real converge
// serving its GraphQL API behind a token file; the saga's binding fires on
// the terraform's synced transition and the reactor applies the matching
// job through the API with its token; the job converges on the image the
// terraform built; a redelivery of the same reaction changes nothing; the
// job follows a new terraform generation, and a late redelivery of the old
// generation's reaction does not roll it back.
func TestJobSaga_TerraformSyncedAppliesTheJobOnceOverGraphQL(t *testing.T) {
	t.Parallel()
	const token = "jobsaga-token-0123456789"
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte(token+" admin jobsaga\n"), 0o600))
	s := apptest.Start(t, apptest.Options{
		GraphQL: resolvers.Mount(resolvers.MountOptions{}),
		Config:  func(c *config.Config) { c.APITokensFile = tokens },
	})
	ctx := context.Background()
	a := apply.StoreApplier{Store: s.Store, Actor: "test"}
	docs, err := datadriven.Documents(false)
	require.NoError(t, err)
	require.NoError(t, apply.All(ctx, a, docs))
	for _, kind := range []string{datadriven.KindFakeTerraform, datadriven.KindFakeK8sJob} {
		require.NoError(t, a.ApplyProviderConfig(ctx, apply.ProviderConfig{Kind: kind, Name: "default", IsDefault: true,
			Spec: json.RawMessage(`{"latency_ms":0}`)}))
	}
	sagaCfg := apply.ProviderConfig{Kind: datadriven.KindJobSaga, Name: "default", IsDefault: true,
		Spec: json.RawMessage(`{"api_url":"` + s.APIURL() + `/graphql"}`), Data: json.RawMessage(`{"token":"` + token + `"}`)}
	require.NoError(t, a.ApplyProviderConfig(ctx, sagaCfg))
	var saga worker.Provider
	providers := datadriven.Providers(s.Log)
	for _, p := range providers {
		if p.Kind().Kind == datadriven.KindJobSaga {
			saga = p
		}
	}
	s.StartWorker(apptest.Worker{Options: worker.Options{MaxParallel: 16}, Providers: providers})

	// A terraform outside the binding's label match starts no saga.
	require.NoError(t, a.ApplyResource(ctx, apply.Resource{Kind: datadriven.KindFakeTerraform, Name: "lone-terraform",
		Labels: map[string]string{"team": "lone"}, Spec: json.RawMessage(`{"source":"s3://b/lone/main.tf"}`)}))
	require.NoError(t, a.ApplyResource(ctx, apply.Resource{Kind: datadriven.KindFakeTerraform, Name: "ops-terraform",
		Labels: map[string]string{"saga": "jobsaga", "team": "ops"}, Spec: json.RawMessage(`{"team":"ops","source":"s3://b/ops/main.tf"}`)}))
	tf := s.WaitPhase(datadriven.KindFakeTerraform, "ops-terraform", resource.PhaseReady, 60*time.Second)
	job := s.WaitPhase(datadriven.KindFakeK8sJob, datadriven.SagaJobName("ops-terraform"), resource.PhaseReady, 60*time.Second)
	require.Equal(t, decode(t, tf.Status)["image"], decode(t, job.Status)["image"], "the job runs the image the terraform built")
	require.Equal(t, "ops", decode(t, job.Spec)["team"])
	require.Equal(t, "ops-terraform", job.Labels[datadriven.LabelSagaOf])
	require.EqualValues(t, 1, job.Generation)

	// A redelivery (the same dedup token) applies nothing new.
	react := worker.Request{Stage: worker.StageReact, Reaction: "react",
		Resource: worker.Resource{ID: tf.ID.String(), Kind: datadriven.KindFakeTerraform, Name: tf.Name, Labels: tf.Labels, Status: tf.Status, Generation: tf.Generation},
		Config:   worker.EffectiveConfig{Name: "default", Spec: sagaCfg.Spec, Data: sagaCfg.Data},
		React: &worker.Reaction{Transition: manifest.TransitionSynced, Binding: "faketerraform-synced-to-jobsaga",
			Generation: tf.Generation, DedupToken: tf.ID.String() + ":synced:1:faketerraform-synced-to-jobsaga"}}
	job0, err := s.Store.GetResource(ctx, datadriven.KindFakeK8sJob, datadriven.SagaJobName("ops-terraform"))
	require.NoError(t, err)
	_, err = saga.Work(ctx, react)
	require.NoError(t, err)
	again, err := s.Store.GetResource(ctx, datadriven.KindFakeK8sJob, datadriven.SagaJobName("ops-terraform"))
	require.NoError(t, err)
	require.Equal(t, job0.Generation, again.Generation, "a redelivered reaction bumps no generation")
	require.Equal(t, job0.Labels, again.Labels)

	// A wrong token is refused by the API: a terminal failure, not a retry loop.
	bad := react
	bad.Config.Data = json.RawMessage(`{"token":"not-the-token-at-all"}`)
	_, err = saga.Work(ctx, bad)
	require.Error(t, err)
	require.True(t, worker.IsTerminal(err), "%v", err)

	// A new terraform generation: the job follows it to the new image. A
	// late redelivery of the first generation's reaction (its snapshot, its
	// image) then changes nothing: the job never goes back to an older
	// image.
	require.NoError(t, a.ApplyResource(ctx, apply.Resource{Kind: datadriven.KindFakeTerraform, Name: "ops-terraform",
		Labels: tf.Labels, Spec: json.RawMessage(`{"team":"ops","source":"s3://b/ops/v2.tf"}`)}))
	var tf2 resource.Resource
	apptest.WaitFor(t, 60*time.Second, "the second terraform generation synced", func() bool {
		r, err := s.Store.GetResource(ctx, datadriven.KindFakeTerraform, "ops-terraform")
		tf2 = r
		return err == nil && r.Generation == 2 && r.SyncedGen == 2
	})
	newImage := decode(t, tf2.Status)["image"]
	require.NotEqual(t, decode(t, tf.Status)["image"], newImage)
	var job2 resource.Resource
	apptest.WaitFor(t, 60*time.Second, "the job on the second generation's image", func() bool {
		r, err := s.Store.GetResource(ctx, datadriven.KindFakeK8sJob, datadriven.SagaJobName("ops-terraform"))
		job2 = r
		return err == nil && decode(t, r.Spec)["image"] == newImage
	})
	_, err = saga.Work(ctx, react)
	require.NoError(t, err, "a stale delivery is acknowledged, not failed")
	late, err := s.Store.GetResource(ctx, datadriven.KindFakeK8sJob, datadriven.SagaJobName("ops-terraform"))
	require.NoError(t, err)
	require.Equal(t, newImage, decode(t, late.Spec)["image"], "a stale delivery does not roll the job back")
	require.Equal(t, job2.Generation, late.Generation)
	require.Equal(t, job2.Labels, late.Labels)

	s.WaitPhase(datadriven.KindFakeTerraform, "lone-terraform", resource.PhaseReady, 60*time.Second)
	_, err = s.Store.GetResource(ctx, datadriven.KindFakeK8sJob, datadriven.SagaJobName("lone-terraform"))
	require.Error(t, err, "the unlabelled terraform started no saga")
}

func TestJobSaga_UnreadyUntilItsConfigNamesTheAPI(t *testing.T) {
	t.Parallel()
	saga := provider(t, datadriven.KindJobSaga)
	require.False(t, saga.Ready(), "no config yet")
	for cfg, ready := range map[string]bool{
		`{"api_url":"http://127.0.0.1:8080/graphql"}`: true,
		`{"api_url":"ftp://x/graphql"}`:               false,
		`{"api_url":"http:///graphql"}`:               false,
		`{"api_url":3}`:                               false,
		`null`:                                        false,
	} {
		saga.OnConfig(worker.ProviderConfig{Kind: datadriven.KindJobSaga, Name: "default", IsDefault: true, Spec: json.RawMessage(cfg)})
		require.Equal(t, ready, saga.Ready(), cfg)
	}
}
