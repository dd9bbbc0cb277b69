package browsertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/converge-run/converge/core/config"
)

// memberRow selects a member's row on the Cluster page.
func memberRow(id string) string {
	return fmt.Sprintf(`[data-testid=members] tr[data-member=%q]`, id)
}

// TestCluster_DrainFromTheClusterPage: with two brokers running beside the
// ROLE=all member, an admin clicks Drain on one broker's row and confirms;
// the broker (a real in-process member) drains and leaves, its row goes,
// and the shard map shows the other broker owning every broker shard.
func TestCluster_DrainFromTheClusterPage(t *testing.T) {
	chromiumPath(t) // skip early without a browser
	s := startStack(t)
	b1, _ := s.StartProcess(config.RoleBroker)
	b2, _ := s.StartProcess(config.RoleBroker)
	b := newBrowser(t, s.base)

	b.open("/cluster")
	b.waitFor(`document.querySelectorAll('[data-testid=members] tbody tr[data-status=READY]').length === 3`, 30*time.Second)
	b.waitFor(`document.querySelectorAll('[data-testid=shards-BROKER] [data-segment]').length === 2`, 30*time.Second)
	b.shot("cluster-two-brokers")

	b.clickText(memberRow(b2.MemberID), "Drain")
	b.waitFor(`document.querySelector('[role=dialog]')?.textContent.includes('stops claiming')`, 10*time.Second)
	b.requireLabelled()
	b.clickText(`[role=dialog]`, "Drain")
	// The re-tile: broker-1 alone spans the broker shard map, the drained
	// broker's row is gone once it has deregistered.
	b.waitFor(fmt.Sprintf(`(() => { const s = [...document.querySelectorAll('[data-testid=shards-BROKER] [data-segment]')];
	  return s.length === 1 && s[0].dataset.segment === %q && s[0].style.width === '100%%'; })()`, b1.MemberID), 20*time.Second)
	b.waitFor(fmt.Sprintf(`document.querySelector(%q) === null`, memberRow(b2.MemberID)), 60*time.Second)
	b.waitFor(`document.querySelectorAll('[data-testid=members] tbody tr[data-status=READY]').length === 2`, 10*time.Second)
	b.noExceptions()
	b.shot("cluster-drained")
}
