//go:build race

package broker

// raceEnabled: the race detector drops sync.Pool items at random, so a
// pooled path allocates in a way the allocation bounds do not hold to.
const raceEnabled = true
