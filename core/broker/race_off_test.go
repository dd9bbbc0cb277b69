//go:build !race

package broker

import "time"

const raceEnabled = false

// loadSlack is the slack a latency bound of these tests gives a loaded
// machine (see the race build's).
const loadSlack = 750 * time.Millisecond
