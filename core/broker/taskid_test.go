package broker

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/pipeline"
)

// TestTaskID_String is the id's wire form, field by field (brokers of two
// versions read each other's during a rolling upgrade), and parses back;
// building it takes one allocation.
func TestTaskID_String(t *testing.T) { //nolint:paralleltest // AllocsPerRun refuses a parallel test
	id := taskID{
		key: pipeline.TaskKey{ShardID: 203, ResourceID: uuid.MustParse("0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"),
			TaskType: pipeline.TaskReconcile, OpID: uuid.MustParse("ffffffff-0000-4000-8000-000000000001")},
		epoch: 9007199254740993, generation: -1, stage: "APPLY", final: true, finalizer: "team.example/route|x y",
	}
	want := "v1|203|0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9|" + string(pipeline.TaskReconcile) +
		"|ffffffff-0000-4000-8000-000000000001|9007199254740993|-1|APPLY|1|team.example%2Froute%7Cx+y"
	require.Equal(t, want, id.String())
	back, err := parseTaskID(id.String())
	require.NoError(t, err)
	require.Equal(t, id, back)
	id.final, id.finalizer = false, ""
	require.True(t, strings.HasSuffix(id.String(), "|APPLY|0|"), id.String())
	allocs := testing.AllocsPerRun(50, func() { _ = id.String() })
	require.LessOrEqual(t, allocs, 1.0, "one buffer")
}
