package apptest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
)

// poll is how often the waits re-check their condition.
const poll = 20 * time.Millisecond

// eventually re-checks cond every poll until it holds (true) or within
// has passed (false).
func eventually(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(poll)
	}
	return true
}

// WaitFor re-checks cond until it holds, failing the test after within.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !eventually(within, cond) {
		t.Fatalf("timed out after %s waiting for %s", within, what)
	}
}

// WaitForShowing is WaitFor whose failure adds describe's account of what
// it sees then (rows, ranges: what the test will want to read).
func WaitForShowing(t testing.TB, within time.Duration, what string, cond func() bool, describe func() string) {
	t.Helper()
	if !eventually(within, cond) {
		t.Fatalf("timed out after %s waiting for %s; %s", within, what, describe())
	}
}

// WaitPhase waits until kind/name is in phase and returns it; on timeout
// the failure names the last phase seen and the resource's conditions.
func (s *Stack) WaitPhase(kind, name string, phase resource.Phase, within time.Duration) resource.Resource {
	s.t.Helper()
	return WaitPhase(s.t, s.Store, kind, name, phase, within)
}

// WaitPhase waits until kind/name is in phase in st.
func WaitPhase(t testing.TB, st *store.Store, kind, name string, phase resource.Phase, within time.Duration) resource.Resource {
	t.Helper()
	ctx := context.Background()
	var last resource.Resource
	if eventually(within, func() bool {
		r, err := st.GetResource(ctx, kind, name)
		if err == nil {
			last = r
		}
		return err == nil && r.Phase == phase
	}) {
		return last
	}
	t.Fatalf("%s/%s did not reach %s within %s; last phase %q (gen %d synced %d failure %d) status %s%s", kind, name, phase, within,
		last.Phase, last.Generation, last.SyncedGen, last.FailureGen, last.Status, why(st, last))
	return last
}

// WaitSubtree waits until done holds for kind/name and every resource
// composed below it (read in one pass each time), and returns them.
func (s *Stack) WaitSubtree(kind, name string, within time.Duration,
	done func(root resource.Resource, below []resource.Resource) bool) (resource.Resource, []resource.Resource) {
	s.t.Helper()
	ctx := context.Background()
	var (
		root  resource.Resource
		below []resource.Resource
	)
	if eventually(within, func() bool {
		r, err := s.Store.GetResource(ctx, kind, name)
		if err != nil {
			return false
		}
		root = r
		below, err = s.descendants(ctx, r)
		return err == nil && done(root, below)
	}) {
		return root, below
	}
	var b strings.Builder
	for _, c := range below {
		fmt.Fprintf(&b, "\n  %s/%s %s", c.Kind, c.Name, c.Phase)
	}
	s.t.Fatalf("%s/%s's subtree did not settle as wanted within %s; root %s, below:%s", kind, name, within, root.Phase, b.String())
	return root, below
}

// AllIn is a WaitSubtree condition: the root and everything below in phase.
func AllIn(phase resource.Phase) func(resource.Resource, []resource.Resource) bool {
	return func(root resource.Resource, below []resource.Resource) bool {
		if root.Phase != phase {
			return false
		}
		for _, r := range below {
			if r.Phase != phase {
				return false
			}
		}
		return true
	}
}

// descendants walks the owner tree below r, a page of children at a time.
func (s *Stack) descendants(ctx context.Context, r resource.Resource) ([]resource.Resource, error) {
	var out []resource.Resource
	queue := []resource.Resource{r}
	for len(queue) > 0 {
		parent := queue[0]
		queue = queue[1:]
		after := ""
		for {
			page, err := s.Store.ListResources(ctx, store.ListOptions{OwnerID: &parent.ID, Limit: 500, After: after})
			if err != nil {
				return nil, err
			}
			out = append(out, page.Items...)
			queue = append(queue, page.Items...)
			if page.NextCursor == "" {
				break
			}
			after = page.NextCursor
		}
	}
	return out, nil
}

// why renders r's conditions for a failure message.
func why(st *store.Store, r resource.Resource) string {
	conds, err := st.Conditions(context.Background(), r.ID)
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, c := range conds {
		fmt.Fprintf(&b, " [%s=%s %s: %s]", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}
