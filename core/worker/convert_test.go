package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// A react task's resource carries the reactor's kind and version (they
// route it to the provider) and the watched resource's id, name and parts;
// the request names the watched kind, without which a reactor bound to
// several kinds could not tell a vpc "main" from a subnet "main".
func TestRequestFromTask_AReactTaskNamesTheWatchedKind(t *testing.T) {
	t.Parallel()
	req, err := requestFromTask(&workerv1.StageTask{TaskId: "t", Stage: workerv1.Stage_STAGE_REACT, Reaction: "record",
		Resource: &workerv1.Resource{Id: "r1", Kind: "sink", Version: "v1", Name: "main", Generation: 2},
		Request: &workerv1.StageTask_React{React: &workerv1.ReactRequest{Transition: "synced", WatchKind: "vpc",
			BindingName: "audit", DedupToken: "r1:synced:2:audit", Generation: 2}}}, nil)
	require.NoError(t, err)
	require.Equal(t, StageReact, req.Stage)
	require.Equal(t, "sink", req.Resource.Kind)
	require.Equal(t, &Reaction{Transition: "synced", WatchKind: "vpc", Binding: "audit", DedupToken: "r1:synced:2:audit", Generation: 2},
		req.React)
}
