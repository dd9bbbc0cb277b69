package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
)

// follower tracks one root and its direct children for apply --wait.
type follower struct {
	a        *app
	c        *Conn
	target   ref
	root     WaitRow
	children map[string]WaitRow
	// reported is the failure line last printed of each resource, by id: a
	// line is printed once, again only when it says something new.
	reported map[string]string
	// bar draws progress on a terminal; elsewhere (CI logs, pipes) each
	// change of the summary is one plain line, and last is the latest.
	bar  *progressbar.ProgressBar
	last string
	// progress is the latest subtreeProgress push (nil before the first);
	// readSig is the progress the direct children were last read at.
	progress *WatchSubtreeSubtreeProgress
	readSig  string
	// lastErr is the last read the server did not answer (nil once it
	// answered one).
	lastErr error
}

// newWaitBar is the terminal progress bar of a wait.
func newWaitBar(w io.Writer, what string) *progressbar.ProgressBar {
	return progressbar.NewOptions(1,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionSetWidth(30),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetSpinnerChangeInterval(0), // no background goroutine
		progressbar.OptionUseANSICodes(true),
		progressbar.OptionThrottle(50*time.Millisecond),
	)
}

// waitReady follows r until it is READY (nil), fails terminally or settles
// DEGRADED (an error naming why), or ctx ends (a timeout error). Like run
// --wait it outlives its server: the subscription is re-made when the
// server ends it, what it follows is re-read after a reconnect and every
// waitRecheck (a restarting or draining server leaves it silent until its
// connection closes), and a read the server does not answer is tried again
// until the timeout.
func (a *app) waitReady(ctx context.Context, c *Conn, r ref, timeout time.Duration) error {
	f := &follower{a: a, c: c, target: r, children: map[string]WaitRow{}, reported: map[string]string{}}
	// A read that fails once the timeout has passed (a dial or a query cut
	// short by it, before the first verdict too) is the timeout.
	timedOut := func(err error) error {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("timed out after %s waiting for resource/%s%s", timeout, r, lastReadFailed(f.lastErr))
		}
		return err
	}
	// The first reads are tried again as the later ones are.
	note := func(err error) { _ = f.retry(ctx, err) }
	ws := c.NewWS()
	defer func() { _ = ws.Close() }()
	if err := untilAnswered(ctx, note, func() error {
		if _, err := ws.Start(ctx); err != nil {
			return fmt.Errorf("wait for %s: %w", r, err)
		}
		return nil
	}); err != nil {
		return timedOut(err)
	}
	if err := untilAnswered(ctx, note, func() error { return f.readRoot(ctx) }); err != nil {
		return timedOut(err)
	}
	progress, _, err := WatchSubtree(ctx, ws, f.root.Id)
	if err != nil {
		return timedOut(fmt.Errorf("wait for %s: %w", r, err))
	}
	if err := untilAnswered(ctx, note, func() error { return f.listChildren(ctx) }); err != nil {
		return timedOut(err)
	}
	if a.env.StderrIsTerminal {
		f.bar = newWaitBar(a.stderr(), r.String())
	}
	defer f.exit()
	tick := time.NewTicker(waitRecheck)
	defer tick.Stop()
	fresh := true // the initial read: the root, then its children
	for {
		done, err, rerr := f.settle(ctx, fresh)
		if rerr != nil { // (a settle that read nothing says nothing of the server)
			if rerr = f.retry(ctx, rerr); rerr != nil {
				return timedOut(rerr)
			}
		}
		f.render()
		if done {
			f.exit()
			if err == nil {
				fmt.Fprintf(a.progressOut(), "resource/%s is READY%s\n", r, f.summary())
			}
			return err
		}
		fresh = false
		select {
		case <-ctx.Done():
			return f.ended(ctx, timeout)
		case ev, ok := <-progress:
			if !ok {
				// The server ended the subscription (it restarts, the
				// session was lost): follow anew, and read what it missed.
				if progress, _, err = WatchSubtree(ctx, ws, f.root.Id); err != nil {
					return fmt.Errorf("wait for %s: %w", r, err)
				}
				rerr = f.refresh(ctx)
				break
			}
			rerr = f.onProgress(ctx, ev)
		case <-ws.Reconnected():
			// The server pushes a fresh snapshot on re-subscribe; what the
			// verdict reads directly is re-read once.
			rerr = f.refresh(ctx)
		case <-tick.C:
			rerr = f.recheck(ctx)
		}
		if rerr = f.retry(ctx, rerr); rerr != nil {
			return timedOut(rerr)
		}
	}
}

// waitRecheck is how often a wait re-reads what it follows behind its
// subscription: a push is a hint, never the source of truth.
const waitRecheck = 3 * time.Second

// untilAnswered runs read, one of the first reads of a wait, until the
// server answers it, as a wait's later reads are tried: a read the server
// did not answer (unanswered: a refused connection, a restart, a proxy's
// 502-504) is handed to note (which says so, once per outage) and tried
// again, backing off up to waitRecheck, until ctx ends (its error). Any
// other error — the server's answer, a usage error — ends it at once; an
// answered read is handed to note as nil.
func untilAnswered(ctx context.Context, note func(error), read func() error) error {
	backoff := 100 * time.Millisecond
	for {
		err := read()
		switch {
		case err == nil:
			note(nil)
			return nil
		case !unanswered(err):
			return err
		case ctx.Err() != nil: // the read met the end of ctx: that ends it, as while backing off
			return ctx.Err()
		}
		note(err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, waitRecheck)
	}
}

// ended is the error of a wait ctx ended: the timeout, with the subtree as
// one last read says it is (and the last read the server did not answer,
// if the reads were failing), or the interrupt.
func (f *follower) ended(ctx context.Context, timeout time.Duration) error {
	f.exit()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ctx.Err()
	}
	// Best effort: report the subtree as one read.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	_ = f.refresh(rctx)
	cancel()
	return fmt.Errorf("timed out after %s waiting for resource/%s: it is %s%s%s",
		timeout, f.target, f.root.Phase, f.summary(), lastReadFailed(f.lastErr))
}

// retry takes the error of a read of the wait: nil when there was none or
// the server did not answer it (kept in lastErr and tried again at the next
// recheck or reconnect), else err.
func (f *follower) retry(ctx context.Context, err error) error {
	switch {
	case err == nil:
		f.lastErr = nil
		return nil
	case ctx.Err() == nil && unanswered(err):
		if f.bar != nil && f.lastErr == nil { // above the bar, as the failures are
			_, _ = progressbar.Bprintln(f.bar, unansweredWarning(err))
		} else {
			f.a.warnUnanswered(f.lastErr, err)
		}
		f.lastErr = err
		return nil
	}
	return err
}

// warnUnanswered says on stderr, once per outage (prev is the failure
// before err, nil after an answer), that a read of a wait or a watch went
// unanswered and is tried again.
func (a *app) warnUnanswered(prev, err error) {
	if prev == nil {
		fmt.Fprintln(a.stderr(), unansweredWarning(err))
	}
}

func unansweredWarning(err error) string { return "warning: " + FormatError(err) + " (trying again)" }

// recheck re-reads the root behind the subscription, and its direct
// children when the root moved. A push the progress has not seen means the
// progress is stale (the subscription went silent): the counts then come
// from the direct children until the next push.
func (f *follower) recheck(ctx context.Context) error {
	prev := f.root
	if err := f.readRoot(ctx); err != nil {
		return err
	}
	if p := f.progress; p != nil && p.Root != nil && p.Root.Phase != f.root.Phase {
		f.progress = nil
	}
	if f.root.Phase != prev.Phase || f.root.Generation != prev.Generation || f.root.SyncedGeneration != prev.SyncedGeneration {
		return f.listChildren(ctx)
	}
	return nil
}

// unanswered reports whether err is a read the server did not answer: it
// did not reach it (it restarts, the network dropped, a proxy answered
// 502-504 for it; a query or a websocket dial) or the server could not serve it (INTERNAL: a server
// stopping answers so while it shuts down). A wait tries such a read again;
// an answer (NOT_FOUND, FORBIDDEN, ...) ends it.
func unanswered(err error) bool {
	var e *APIError
	if errors.As(apiError(err), &e) {
		return e.Code == "INTERNAL" || e.Code == "" && (e.Status == http.StatusBadGateway ||
			e.Status == http.StatusServiceUnavailable || e.Status == http.StatusGatewayTimeout)
	}
	var ue *url.Error
	var we *wsUnreachedError
	return (errors.As(err, &ue) || errors.As(err, &we)) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// lastReadFailed names the last read the server did not answer, for a
// wait's timeout ("" when the last read succeeded).
func lastReadFailed(err error) string {
	if err == nil {
		return ""
	}
	return " (the last read failed: " + FormatError(err) + ")"
}

// onProgress takes one subtreeProgress push: it names new failures with
// the reasons the push carries (no read), re-reads the root when its phase changed, and
// re-reads the direct children the verdict weighs only while something
// failed and the picture changed — never on a timer.
func (f *follower) onProgress(ctx context.Context, ev WatchSubtreeWsResponse) error {
	if len(ev.Errors) > 0 {
		if isNotFound(ev.Errors) { // followed anew after it was deleted
			return fmt.Errorf("wait for %s: the resource was deleted", f.target)
		}
		return fmt.Errorf("wait for %s: %w", f.target, apiError(ev.Errors))
	}
	if ev.Data == nil {
		return nil
	}
	p := ev.Data.SubtreeProgress
	f.progress = &p
	if p.Root == nil {
		return fmt.Errorf("wait for %s: the resource was deleted", f.target)
	}
	if p.Root.Phase != f.root.Phase {
		if err := f.readRoot(ctx); err != nil {
			return err
		}
	}
	for _, m := range p.Failures {
		f.printFailure(m.Id, failureLine(m.SubtreeFailure))
	}
	failing := p.FailureCount > 0 || p.Root.Phase == PhaseDegraded || p.Root.Phase == PhaseFailed
	if sig := progressSig(p); failing && sig != f.readSig {
		f.readSig = sig
		return f.listChildren(ctx)
	}
	return nil
}

// progressSig is what a push says, for "did anything change".
func progressSig(p WatchSubtreeSubtreeProgress) string {
	var b strings.Builder
	if p.Root != nil {
		b.WriteString(string(p.Root.Phase))
	}
	for _, c := range p.Counts {
		fmt.Fprintf(&b, "|%s:%s:%d", c.Kind, c.Phase, c.Count)
	}
	for _, m := range p.Failures {
		fmt.Fprintf(&b, "|%s:%s:%t", m.Id, m.Phase, m.FailureTerminal)
	}
	return b.String()
}

// settle decides whether waiting is over from one consistent read of the
// subtree. Events for the root and for its children arrive on separate
// subscriptions, so between reads the root can be READY while a child's last
// change is still on its way; a verdict drawn from such a mix (and the final
// line printed with it) would contradict itself. fresh says the state is
// one read, the root first; otherwise a verdict that would end the wait is
// re-drawn from a refresh. rerr is a failed re-read.
func (f *follower) settle(ctx context.Context, fresh bool) (done bool, err, rerr error) {
	done, err = f.verdict()
	if !done || fresh {
		return done, err, nil
	}
	if rerr := f.refresh(ctx); rerr != nil {
		return false, nil, rerr
	}
	done, err = f.verdict()
	return done, err, nil
}

func (f *follower) readRoot(ctx context.Context) error {
	resp, err := WaitTarget(ctx, f.c.GQL, f.target.kind, f.target.name)
	if err != nil {
		return fmt.Errorf("wait for %s: %w", f.target, apiError(err))
	}
	if resp.Resource == nil {
		return fmt.Errorf("wait for %s: the resource does not exist (deleted?)", f.target)
	}
	f.root = resp.Resource.WaitRow
	return nil
}

// childPage is how many children one read of listChildren asks for: a
// page of WaitRows, each with up to 20 upstreams, within the API's default
// complexity limit.
const childPage = 100

// listChildren re-reads every direct child.
func (f *follower) listChildren(ctx context.Context) error {
	fresh := map[string]WaitRow{}
	var after *string
	for {
		resp, err := ResourceChildren(ctx, f.c.GQL, f.root.Id, childPage, after)
		if err != nil {
			return fmt.Errorf("list the children of %s: %w", f.target, apiError(err))
		}
		for _, it := range resp.Resources.Items {
			fresh[it.Id] = it.WaitRow
		}
		if after = resp.Resources.NextCursor; after == nil {
			break
		}
	}
	f.children = fresh
	for _, ch := range fresh {
		f.noteFailure(ch)
	}
	return nil
}

func (f *follower) refresh(ctx context.Context) error {
	if err := f.readRoot(ctx); err != nil {
		return err
	}
	return f.listChildren(ctx)
}

// noteFailure prints a directly read child's failure (once: see printFailure).
func (f *follower) noteFailure(ch WaitRow) {
	if ch.Phase != PhaseFailed {
		return
	}
	f.printFailure(ch.Id, fmt.Sprintf("FAILED %s/%s (%s): %s", ch.Kind, ch.Name, retrying(ch.FailureTerminal), why(ch)))
}

func retrying(terminal bool) string {
	if terminal {
		return "terminal"
	}
	return "retrying"
}

// failureLine is how a wait names one failure of a subtreeProgress push:
// "FAILED account/a (terminal): ReconcileError: quota exceeded".
func failureLine(m SubtreeFailure) string {
	what := string(m.Phase)
	if m.Phase == PhaseFailed {
		what += " " + m.Kind + "/" + m.Name + " (" + retrying(m.FailureTerminal) + ")"
	} else {
		what += " " + m.Kind + "/" + m.Name
	}
	switch {
	case m.Reason != nil && *m.Reason != "" && m.Message != nil && *m.Message != "":
		return what + ": " + *m.Reason + ": " + *m.Message
	case m.Message != nil && *m.Message != "":
		return what + ": " + *m.Message
	case m.Reason != nil && *m.Reason != "":
		return what + ": " + *m.Reason
	}
	return what + ": no reason reported"
}

// printFailure prints line for resource id unless it is the line last
// printed for it (a retry with a new message is printed again).
func (f *follower) printFailure(id, line string) {
	if f.reported[id] == line {
		return
	}
	f.reported[id] = line
	if f.bar != nil {
		_, _ = progressbar.Bprintln(f.bar, line)
		return
	}
	fmt.Fprintln(f.a.stderr(), line)
}

// why explains a resource's state from its false conditions, the most
// specific first: the kind's own, then Synced, then Ready.
func why(r WaitRow) string {
	rank := func(t string) int {
		switch t {
		case "Ready":
			return 2
		case "Synced":
			return 1
		}
		return 0
	}
	best := -1
	for i, c := range r.Conditions {
		if c.Status != ConditionStatusFalse || c.Message == nil || *c.Message == "" {
			continue
		}
		if best < 0 || rank(c.Type) < rank(r.Conditions[best].Type) {
			best = i
		}
	}
	if best < 0 {
		return "no reason reported"
	}
	c := r.Conditions[best]
	if c.Reason != nil && *c.Reason != "" {
		return *c.Reason + ": " + *c.Message
	}
	return *c.Message
}

// counts tallies the subtree by phase (the latest push; the direct
// children before the first) and says how many there are.
func (f *follower) counts() (map[Phase]int, int) {
	n := map[Phase]int{}
	if p := f.progress; p != nil {
		for _, c := range p.Counts {
			n[c.Phase] += c.Count
		}
		return n, p.Total
	}
	for _, ch := range f.children {
		n[ch.Phase]++
	}
	return n, len(f.children)
}

// render shows progress: children READY / total on the bar (the root
// itself while it has no children), or a plain line when it changed.
func (f *follower) render() {
	if f.bar == nil {
		line := fmt.Sprintf("resource/%s %s%s", f.target, f.root.Phase, f.summary())
		if line != f.last {
			f.last = line
			fmt.Fprintln(f.a.stderr(), line)
		}
		return
	}
	// The root is one more unit, so the bar fills only when it is READY.
	n, total := f.counts()
	total, ready := total+1, n[PhaseReady]
	if f.root.Phase == PhaseReady {
		ready++
	}
	f.bar.Describe(fmt.Sprintf("%s %s%s", f.target, f.root.Phase, f.summary()))
	if f.bar.GetMax() != total {
		f.bar.ChangeMax(total)
	}
	_ = f.bar.Set(ready)
}

// exit stops the bar and ends its line (idempotent).
func (f *follower) exit() {
	if f.bar != nil {
		_ = f.bar.Exit()
		fmt.Fprintln(f.a.stderr())
		f.bar = nil
	}
}

// summary is " (5/7 children ready; 1 FAILED, 1 RECONCILING)", over the
// whole subtree.
func (f *follower) summary() string {
	n, total := f.counts()
	if total == 0 {
		return ""
	}
	var rest []string
	for _, p := range AllPhase {
		if p != PhaseReady && n[p] > 0 {
			rest = append(rest, fmt.Sprintf("%d %s", n[p], p))
		}
	}
	s := fmt.Sprintf(" (%d/%d children ready", n[PhaseReady], total)
	if len(rest) > 0 {
		s += "; " + strings.Join(rest, ", ")
	}
	return s + ")"
}

// verdict decides whether waiting is over: READY is success; a terminal
// failure of the root, deletion, quarantine, or a subtree where nothing is
// in flight any more and something failed for good (or the root settled
// DEGRADED) end it with an error naming why.
func (f *follower) verdict() (bool, error) {
	r := f.root
	name := "resource/" + f.target.String()
	switch r.Phase {
	case PhaseReady:
		return true, nil
	case PhaseFailed:
		if r.FailureTerminal {
			return true, fmt.Errorf("%s FAILED (terminal): %s", name, why(r))
		}
	case PhaseDeleting:
		return true, fmt.Errorf("%s is being deleted", name)
	case PhaseQuarantined:
		return true, fmt.Errorf("%s is quarantined", name)
	}
	var failed []string
	blocked, notReady := 0, 0
	for _, ch := range f.children {
		if ch.Phase != PhaseReady {
			notReady++
		}
		switch {
		case ch.Phase == PhaseFailed && ch.FailureTerminal:
			failed = append(failed, fmt.Sprintf("%s/%s (%s)", ch.Kind, ch.Name, why(ch)))
		case f.stuck(ch.Id, map[string]bool{}):
			blocked++
		case !settled(ch):
			return false, nil // still in flight
		}
	}
	// A DEGRADED root whose children are all READY again (a transient
	// failure recovered on retry) is not settled: its rollup to READY is
	// on its way. A leaf (nothing below it) settled DEGRADED is its own
	// provider's verdict on its live spec: that settles it.
	leaf := len(f.children) == 0 && (f.progress == nil || f.progress.Total == 0)
	degraded := r.Phase == PhaseDegraded && r.SyncedGeneration >= r.Generation && (notReady > 0 || leaf)
	if len(failed) == 0 && !degraded {
		return false, nil
	}
	sort.Strings(failed)
	msg := fmt.Sprintf("%s cannot become READY: it is %s%s", name, r.Phase, f.summary())
	if len(failed) > 0 {
		msg += "; failed for good: " + strings.Join(failed, ", ")
	}
	if blocked > 0 {
		msg += fmt.Sprintf("; %d waiting behind them", blocked)
	}
	if degraded && len(failed) == 0 {
		msg += ": " + why(r)
	}
	return true, errors.New(msg)
}

// blockedByDependency: the server failed the child because an upstream
// failed for good (Synced=False, reason DependencyFailed); it reconciles only
// once that upstream is fixed.
func blockedByDependency(ch WaitRow) bool {
	for _, c := range ch.Conditions {
		if c.Type == "Synced" && c.Status == ConditionStatusFalse && c.Reason != nil && *c.Reason == "DependencyFailed" {
			return true
		}
	}
	return false
}

// settled: nothing more will happen to the child by itself.
func settled(ch WaitRow) bool {
	switch ch.Phase {
	case PhaseReady, PhaseQuarantined, PhaseOrphaned:
		return true
	case PhaseDegraded:
		return ch.SyncedGeneration >= ch.Generation
	case PhaseFailed:
		return ch.FailureTerminal
	}
	return false
}

// stuck reports whether a child can make no progress: it failed for good,
// or it is RECONCILING behind an upstream that is stuck (the scheduler
// waits for every upstream to sync). Upstreams outside the subtree are
// judged by their phase as of the child's last change.
func (f *follower) stuck(id string, visiting map[string]bool) bool {
	ch, ok := f.children[id]
	if !ok || visiting[id] {
		return false
	}
	if ch.Phase == PhaseFailed && (ch.FailureTerminal || blockedByDependency(ch)) {
		return true
	}
	if ch.Phase != PhaseReconciling {
		return false
	}
	visiting[id] = true
	for _, d := range ch.Dependencies {
		up := d.Upstream
		if _, inTree := f.children[up.Id]; inTree {
			if f.stuck(up.Id, visiting) {
				return true
			}
			continue
		}
		if up.Phase == PhaseFailed && up.FailureTerminal {
			return true
		}
	}
	return false
}
