//go:build race

package broker

import "time"

// raceEnabled: the race detector drops sync.Pool items at random, so a
// pooled path allocates in a way the allocation bounds do not hold to.
const raceEnabled = true

// loadSlack is the slack a latency bound of these tests gives a loaded
// machine. The race detector slows the code several times over, and CI runs
// the race build of every package beside the others on two cores: 750 ms
// was once not enough there (TestDispatcher_ClaimsWaitForTheDrainAgainstPostgres).
const loadSlack = 3 * time.Second
