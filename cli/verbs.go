package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/Khan/genqlient/graphql"
	"github.com/spf13/cobra"
)

// resourceVerb is the shape of quarantine, unquarantine and resync.
type resourceVerb struct {
	use, short, long, example, done string
	call                            func(context.Context, graphql.Client, string, string) (ResourceRow, error)
}

func (a *app) resourceVerbCommand(v resourceVerb) *cobra.Command {
	var kind string
	cmd := &cobra.Command{
		Use:     v.use + " KIND/NAME...",
		Short:   v.short,
		Long:    v.long,
		Example: v.example,
		Args:    minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			refs := make([]ref, len(args))
			for i, n := range args {
				if refs[i], err = parseRef(n, kind); err != nil {
					return err
				}
			}
			structured := a.output == outJSON || a.output == outYAML
			var done []ResourceRow
			for _, r := range refs {
				row, err := v.call(cmd.Context(), c.GQL, r.kind, r.name)
				if err != nil {
					err = fmt.Errorf("%s resource %s: %w", v.use, r, apiError(err))
					if structured && len(done) > 0 { // what was done, then why the rest was not
						return errors.Join(err, writeObjects(a, done, len(args) == 1))
					}
					return err
				}
				switch {
				case structured:
					done = append(done, row)
				case a.output == outName:
					a.printNames(resourceName(r.kind, r.name))
				default:
					fmt.Fprintf(a.stdout(), "resource/%s %s (%s)\n", r, v.done, row.Phase)
				}
			}
			if structured {
				return writeObjects(a, done, len(args) == 1)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "", "the kind, when names are given without KIND/")
	return cmd
}

// writeObjects prints objects as get does with -o json|yaml: the one object
// a command named bare, anything else as a list {"items": [...]}.
func writeObjects[T any](a *app, items []T, one bool) error {
	var v any = page[T]{Items: items}
	if one && len(items) == 1 {
		v = &items[0]
	}
	_, err := a.structured(v)
	return err
}

func (a *app) quarantineCommand() *cobra.Command {
	return a.resourceVerbCommand(resourceVerb{
		use:   "quarantine",
		short: "Set a failing resource aside: frozen from every scheduler, excluded from its root's rollup",
		long: `Quarantine resources: an operator's set-aside for a child that keeps failing and
blocks its root's rollup. A quarantined resource (phase QUARANTINED) is frozen from
every scheduler, excluded from its root's rollup and never reaped, until
conctl unquarantine lifts it. An orphan (phase ORPHANED) is refused: it is
frozen already, and deleted when its grace ends unless its owner composes it
again.`,
		example: `  conctl quarantine vpc/acme-t1-vpc`,
		done:    "quarantined",
		call: func(ctx context.Context, c graphql.Client, kind, name string) (ResourceRow, error) {
			resp, err := QuarantineResource(ctx, c, kind, name)
			if err != nil {
				return ResourceRow{}, err
			}
			return resp.QuarantineResource.ResourceRow, nil
		},
	})
}

func (a *app) unquarantineCommand() *cobra.Command {
	return a.resourceVerbCommand(resourceVerb{
		use:     "unquarantine",
		short:   "Lift a quarantine and re-arm scheduling",
		long:    `Lift the quarantine of resources: they are scheduled again and reconcile to their latest spec.`,
		example: `  conctl unquarantine vpc/acme-t1-vpc`,
		done:    "unquarantined",
		call: func(ctx context.Context, c graphql.Client, kind, name string) (ResourceRow, error) {
			resp, err := UnquarantineResource(ctx, c, kind, name)
			if err != nil {
				return ResourceRow{}, err
			}
			return resp.UnquarantineResource.ResourceRow, nil
		},
	})
}

func (a *app) resyncCommand() *cobra.Command {
	return a.resourceVerbCommand(resourceVerb{
		use:   "resync",
		short: "Re-observe resources without a generation bump",
		long: `Re-pend resources for a fresh observe (drift check) without bumping their
generation: their workers run again against the same spec.`,
		example: `  conctl resync account/acme-t0-account vpc/acme-t0-vpc`,
		done:    "resync requested",
		call: func(ctx context.Context, c graphql.Client, kind, name string) (ResourceRow, error) {
			resp, err := ResyncResource(ctx, c, kind, name)
			if err != nil {
				return ResourceRow{}, err
			}
			return resp.ResyncResource.ResourceRow, nil
		},
	})
}

func (a *app) runCommand() *cobra.Command {
	var (
		kind    string
		input   string
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run VERB KIND/NAME [--input JSON] [--wait]",
		Short: "Invoke an operator verb on a resource",
		Long: `Invoke an operator verb (a subresource operation the resource's kind declares,
e.g. vpc's enable_flow_logs) with an optional JSON input. conctl prints the
operation's id; with --wait it follows the operation over a subscription until
it SUCCEEDS (printing its output; exit 0) or FAILS (exit 1), across a restart of
the server or a dropped connection, its first connection included (it connects
and subscribes anew and re-reads the operation, every 3 s as well), or until
--timeout passes.`,
		Example: `  conctl run enable_flow_logs vpc/acme-t0-vpc --input '{"retention_days": 7}' --wait
  conctl get operations vpc/acme-t0-vpc`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTimeout(wait, timeout); err != nil {
				return err
			}
			r, err := parseRef(args[1], kind)
			if err != nil {
				return err
			}
			var in *json.RawMessage
			if input != "" {
				if !json.Valid([]byte(input)) {
					return usageError{fmt.Errorf("--input is not valid JSON: %s", input)}
				}
				raw := json.RawMessage(input)
				in = &raw
			}
			return a.run(cmd.Context(), r, args[0], in, wait, timeout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kind, "kind", "", "the kind, when NAME is given without KIND/")
	f.StringVar(&input, "input", "", "the verb's input, a JSON document")
	f.BoolVar(&wait, "wait", false, "wait until the operation SUCCEEDS or FAILS")
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "how long --wait waits (a positive duration)")
	return cmd
}

func (a *app) run(ctx context.Context, r ref, verb string, input *json.RawMessage, wait bool, timeout time.Duration) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	resp, err := RunOperation(ctx, c.GQL, r.kind, r.name, verb, input)
	if err != nil {
		return fmt.Errorf("run %s on %s: %w", verb, r, apiError(err))
	}
	op := resp.RunOperation.OperationRow
	if !wait {
		if a.output == outName {
			a.printNames("operation/" + op.Id)
			return nil
		}
		if ok, err := a.structured(op); ok {
			return err
		}
		fmt.Fprintf(a.stdout(), "operation/%s %s (%s on resource/%s)\n", op.Id, op.State, verb, r)
		return nil
	}
	fmt.Fprintf(a.stderr(), "operation/%s %s (%s on resource/%s)\n", op.Id, op.State, verb, r)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	final, err := a.followOperation(ctx, c, op, a.stderr())
	if errors.Is(err, context.DeadlineExceeded) {
		var rf readFailedError
		if errors.As(err, &rf) {
			return fmt.Errorf("timed out after %s waiting for operation %s (last state %s; %s)", timeout, op.Id, final.State, rf.Error())
		}
		return fmt.Errorf("timed out after %s waiting for operation %s (last state %s)", timeout, op.Id, final.State)
	}
	if err != nil {
		return err
	}
	if ok, err := a.structured(final); ok {
		if err != nil {
			return err
		}
	} else if a.output == outName {
		a.printNames("operation/" + final.Id)
	} else {
		fmt.Fprintf(a.stdout(), "operation/%s %s\n", final.Id, final.State)
		if final.Output != nil {
			fmt.Fprintln(a.stdout(), indentJSON(*final.Output, ""))
		}
	}
	if final.State == OperationStateFailed {
		return fmt.Errorf("operation %s FAILED: %s", final.Id, orNone(final.Error))
	}
	return nil
}

// followOperation waits for op to reach SUCCEEDED or FAILED, printing each
// state change on progress. The subscription pushes the current state
// first; behind it, the operation is re-read after a reconnect, when the
// server ends the subscription early (which is then made anew), and every
// operationRecheck (a NOTIFY is a hint, never the source of truth). A read
// the server does not answer (it restarts, the network dropped) is tried
// again at the next of these, the first connection until it is made; ctx's
// end then names it (readFailedError).
func (a *app) followOperation(ctx context.Context, c *Conn, op OperationRow, progress io.Writer) (OperationRow, error) {
	last := op
	var lastErr error // the last read the server did not answer
	ws := c.NewWS()
	defer func() { _ = ws.Close() }()
	if err := untilAnswered(ctx, func(err error) {
		if err != nil {
			a.warnUnanswered(lastErr, err)
		}
		lastErr = err
	}, func() error {
		if _, err := ws.Start(ctx); err != nil {
			return fmt.Errorf("follow operation %s: %w", op.Id, err)
		}
		return nil
	}); err != nil {
		if ctx.Err() != nil && lastErr != nil {
			return last, errors.Join(ctx.Err(), readFailedError{lastErr})
		}
		return last, err
	}
	updates, _, err := WatchOperation(ctx, ws, op.Id)
	if err != nil {
		return last, fmt.Errorf("follow operation %s: %w", op.Id, err)
	}
	tick := time.NewTicker(operationRecheck)
	defer tick.Stop()
	for {
		var cur *OperationRow
		var rerr error // a read of the operation that failed
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return last, errors.Join(ctx.Err(), readFailedError{lastErr})
			}
			return last, ctx.Err()
		case u, ok := <-updates:
			switch {
			case !ok:
				if updates, _, err = WatchOperation(ctx, ws, op.Id); err != nil {
					return last, fmt.Errorf("follow operation %s: %w", op.Id, err)
				}
				cur, rerr = readOperation(ctx, c, op.Id)
			case len(u.Errors) > 0:
				return last, fmt.Errorf("follow operation %s: %w", op.Id, apiError(u.Errors))
			case u.Data != nil:
				cur = &u.Data.OperationUpdated.OperationRow
			}
		case <-ws.Reconnected():
			cur, rerr = readOperation(ctx, c, op.Id)
		case <-tick.C:
			cur, rerr = readOperation(ctx, c, op.Id)
		}
		switch {
		case rerr == nil:
			lastErr = nil
		case ctx.Err() != nil: // the timeout or an interrupt: said above
			continue
		case unanswered(rerr):
			a.warnUnanswered(lastErr, rerr)
			lastErr = rerr
			continue
		default:
			return last, rerr
		}
		if cur == nil {
			continue
		}
		if cur.State != last.State {
			fmt.Fprintf(progress, "operation/%s %s\n", cur.Id, cur.State)
		}
		last = *cur
		if isFinal(cur.State) {
			return last, nil
		}
	}
}

// readFailedError is the last read of a wait the server did not answer.
type readFailedError struct{ err error }

func (e readFailedError) Error() string { return "the last read failed: " + FormatError(e.err) }
func (e readFailedError) Unwrap() error { return e.err }

// operationRecheck is how often a followed operation is re-read behind its
// subscription.
const operationRecheck = 3 * time.Second

func isFinal(s OperationState) bool { return s == OperationStateSucceeded || s == OperationStateFailed }

func readOperation(ctx context.Context, c *Conn, id string) (*OperationRow, error) {
	resp, err := GetOperation(ctx, c.GQL, id)
	if err != nil {
		return nil, fmt.Errorf("follow operation %s: %w", id, apiError(err))
	}
	if resp.Operation == nil {
		return nil, notFound("operation", id)
	}
	return &resp.Operation.OperationRow, nil
}
