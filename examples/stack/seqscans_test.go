package stack

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A window's Seq Scan rows are each table's difference, summed apart for the
// outbox's partitions and the rest, and the tables over a floor come most
// rows first.
func TestSeqRows(t *testing.T) {
	t.Parallel()
	before := SeqRows{Tables: map[string]TableScans{
		"resources": {Scans: 1, Rows: 10}, "work_queue_p3": {Scans: 2, Rows: 5}, "work_outbox_p0": {Scans: 4, Rows: 40},
	}}
	after := SeqRows{Tables: map[string]TableScans{
		"resources": {Scans: 3, Rows: 5010}, "work_queue_p3": {Scans: 2, Rows: 5}, "work_outbox_p0": {Scans: 9, Rows: 340},
		"resource_deps": {Scans: 1, Rows: 700},
	}}
	d := after.Sub(before)
	require.Equal(t, TableScans{Scans: 2, Rows: 5000}, d.Tables["resources"])
	require.Equal(t, TableScans{Scans: 1, Rows: 700}, d.Tables["resource_deps"], "a table first read in the window")
	require.Equal(t, int64(5700), d.Fleet())
	require.Equal(t, int64(300), d.Outbox())
	require.Equal(t, []string{"resources", "resource_deps", "work_outbox_p0"}, d.Over(300))
	require.Empty(t, d.Over(10000))
}
