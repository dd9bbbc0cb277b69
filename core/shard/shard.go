// Package shard names the logical shard space every hot table is keyed by:
// 256 shards, 16 per partition, and the contiguous range of them a pod owns
// or a pass works on.
package shard

import "fmt"

// Total is the number of logical shards (shard_id is 0..Total-1).
const Total = 256

// PartitionWidth is the number of shards one partition of the queue tables
// holds.
const PartitionWidth = 16

// Range is a half-open range of logical shards [Lo, Hi), as assign_member_shards
// and cluster_members (shard_lo, shard_hi) hold it. The zero value is empty:
// a pod with it owns nothing. Statements filter
// shard_id BETWEEN r.Lo AND r.Last() so the planner prunes to the partitions
// that hold the range.
type Range struct {
	Lo, Hi int
}

// All is the whole logical shard space.
var All = Range{Lo: 0, Hi: Total}

// Between is the range of shards lo..hi, both inclusive.
func Between(lo, hi int) Range { return Range{Lo: lo, Hi: hi + 1} }

// Empty reports whether the range holds no shard.
func (r Range) Empty() bool { return r.Hi <= r.Lo }

// Last is the inclusive upper shard (Hi-1), the bound a
// shard_id BETWEEN lo AND hi filter takes. Meaningless when Empty.
func (r Range) Last() int { return r.Hi - 1 }

// Len is the number of shards in the range.
func (r Range) Len() int { return max(0, r.Hi-r.Lo) }

// String renders the inclusive bounds, "0-15" (or "empty").
func (r Range) String() string {
	if r.Empty() {
		return "empty"
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Last())
}
