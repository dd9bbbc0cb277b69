package app_test

import (
	"testing"
	"time"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgtest"
)

// DATABASE_READ_URL serves the UI's and the API's reads; what the broker
// claims by must come from the primary. The read pool here is another
// database, a replica that never catches up: a kind applied on the primary
// is still served, and its resource reconciled, well within the kind
// cache's 30 s failsafe.
func TestProcess_KindsComeFromThePrimaryNotTheReadReplica(t *testing.T) {
	t.Parallel()
	lagging := pgtest.URL(t) // migrated, and empty for good
	s := apptest.Start(t, apptest.Options{
		Config:  func(c *config.Config) { c.DatabaseReadURL = lagging },
		Workers: []apptest.Worker{{Providers: []worker.Provider{apptest.NewProvider("leaf", leafWork)}}},
	})
	primary := s.Store.PrimaryReads()
	applyManifest(t, primary, leafKind)
	applyResource(t, primary, "leaf", "a", `{}`)
	apptest.WaitPhase(t, primary, "leaf", "a", resource.PhaseReady, 20*time.Second)
}
