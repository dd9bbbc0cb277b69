package pipeline

import (
	"testing"

	"github.com/google/uuid"
)

// Heartbeats and releases lock queue rows in primary-key order, the order
// the drain locks them in (see byPartition).
func TestByPartitionSortsEachGroupInKeyOrder(t *testing.T) {
	a := uuid.MustParse("00000000-0000-0000-0000-0000000000aa")
	b := uuid.MustParse("ff000000-0000-0000-0000-000000000001")
	keys := []TaskKey{
		{ShardID: 20, ResourceID: b, TaskType: TaskReconcile},
		{ShardID: 3, ResourceID: b, TaskType: TaskReconcile},
		{ShardID: 3, ResourceID: a, TaskType: TaskReconcile},
		{ShardID: 3, ResourceID: a, TaskType: TaskDelete},
		{ShardID: 2, ResourceID: b, TaskType: TaskReconcile},
		{ShardID: 300, ResourceID: a, TaskType: TaskReconcile}, // outside [0, 255]
	}
	got := byPartition(0, 255, keys)
	want := map[int][]TaskKey{
		0: {keys[4], keys[3], keys[2], keys[1]},
		1: {keys[0]},
	}
	if len(got) != len(want) {
		t.Fatalf("groups %v, want partitions 0 and 1", got)
	}
	for p, ks := range want {
		if len(got[p]) != len(ks) {
			t.Fatalf("partition %d: %v, want %v", p, got[p], ks)
		}
		for i := range ks {
			if got[p][i] != ks[i] {
				t.Fatalf("partition %d, position %d: %v, want %v (all: %v)", p, i, got[p][i], ks[i], got[p])
			}
		}
	}
}
