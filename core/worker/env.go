package worker

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// OptionsFromEnv reads the worker's tunables from the environment:
// WORKER_MAX_PARALLEL (default 64) and WORKER_DRAIN_TIMEOUT (default 50s).
func OptionsFromEnv() (Options, error) { return optionsFrom(os.Getenv) }

func optionsFrom(getenv func(string) string) (Options, error) {
	var o Options
	if v := getenv("WORKER_MAX_PARALLEL"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("WORKER_MAX_PARALLEL=%q: want a positive integer", v)
		}
		o.MaxParallel = n
	}
	if v := getenv("WORKER_DRAIN_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return o, fmt.Errorf("WORKER_DRAIN_TIMEOUT=%q: want a positive duration like 50s", v)
		}
		o.DrainTimeout = d
	}
	return o, nil
}
