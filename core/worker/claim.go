package worker

import "context"

// Claim identifies the claim a handler call serves: the broker that leased
// the task and the lease's claim_epoch. Each claim of a task carries a fresh
// epoch, and Converge applies at most one result per claim (the drain drops
// a result whose epoch the queue row no longer holds, and a second result of
// the same claim), so a handler that writes to the outside world can key its
// own idempotency, or an audit of executions, on (resource id, epoch).
type Claim struct {
	// Epoch is the lease's claim_epoch (0 when the broker sent no fence).
	Epoch int64
	// Broker is the member id of the broker that holds the lease.
	Broker string
	// TaskID is the stage dispatch's id (a re-dispatch of the same stage
	// under the same claim has a different one).
	TaskID string
}

type claimKey struct{}

// ClaimFrom returns the claim of the task a handler's ctx belongs to; ok is
// false outside a handler call.
func ClaimFrom(ctx context.Context) (c Claim, ok bool) {
	c, ok = ctx.Value(claimKey{}).(Claim)
	return c, ok
}

func withClaim(ctx context.Context, c Claim) context.Context {
	return context.WithValue(ctx, claimKey{}, c)
}
