package engine

import (
	"context"
	"time"
)

// Every runs step once per interval until ctx ends (the first run one
// interval in), and returns nil then. For refreshers whose step handles its
// own errors, such as the file reloaders of TLS material and token files.
func Every(ctx context.Context, interval time.Duration, step func()) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			step()
		}
	}
}
