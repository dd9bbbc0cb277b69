package control

import (
	"reflect"
	"testing"
)

func TestLanes(t *testing.T) {
	cases := []struct {
		lo, hi, n int
		want      [][2]int
	}{
		{0, 255, 2, [][2]int{{0, 127}, {128, 255}}},
		{0, 255, 1, [][2]int{{0, 255}}},
		{0, 255, 3, [][2]int{{0, 95}, {96, 175}, {176, 255}}},
		// a range inside one partition is one lane whatever n asks
		{20, 27, 4, [][2]int{{20, 27}}},
		// ragged ends stay inside the owned range
		{5, 40, 2, [][2]int{{5, 31}, {32, 40}}},
		{0, 255, 0, [][2]int{{0, 255}}},
		{10, 9, 2, nil},
	}
	for _, c := range cases {
		got := Lanes(c.lo, c.hi, c.n)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Lanes(%d, %d, %d) = %v, want %v", c.lo, c.hi, c.n, got, c.want)
		}
		// every shard of [lo, hi] in exactly one lane, each lane inside
		// whole partitions' bounds
		next := c.lo
		for _, l := range got {
			if l[0] != next || l[1] < l[0] {
				t.Errorf("Lanes(%d, %d, %d): lane %v does not continue at %d", c.lo, c.hi, c.n, l, next)
			}
			next = l[1] + 1
		}
		if len(got) > 0 && next != c.hi+1 {
			t.Errorf("Lanes(%d, %d, %d) ends at %d, want %d", c.lo, c.hi, c.n, next-1, c.hi)
		}
	}
}
