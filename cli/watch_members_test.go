package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// watch nodes --watch-only records the membership the server pushes first
// and prints only what changes after it; without --watch-only the first
// push is listed.
func TestMemberWatch_WatchOnlyPrintsOnlyChanges(t *testing.T) {
	t.Parallel()
	member := func(id string, status MemberStatus) MemberRow {
		return MemberRow{Id: id, Role: "ALL", Status: status, Version: "v", StartedAt: time.Unix(0, 0)}
	}
	changes := []string{"MODIFIED a DRAINING", "DELETED b READY", "ADDED c READY"} // by id
	for _, tc := range []struct {
		reason    string
		watchOnly bool
		want      []string
	}{
		{"--watch-only: the current members are not printed", true, changes},
		{"without it they are listed first", false, append([]string{"ADDED a READY", "ADDED b READY"}, changes...)},
	} {
		var out bytes.Buffer
		a := &app{env: Env{Stdout: &out, Age: func(time.Time) string { return "1m" }}.withDefaults(), output: outTable}
		w := a.newMemberWatch(tc.watchOnly)
		require.NoError(t, w.onPush([]MemberRow{member("a", "READY"), member("b", "READY")}))
		require.NoError(t, w.onPush([]MemberRow{member("a", "READY"), member("b", "READY")}), "nothing changed")
		require.NoError(t, w.onPush([]MemberRow{member("a", "DRAINING"), member("b", "READY")}))
		require.NoError(t, w.onPush([]MemberRow{member("a", "DRAINING"), member("c", "READY")}))
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n")[1:] { // after the header
			f := strings.Fields(l)
			got = append(got, strings.Join([]string{f[0], f[1], f[3]}, " "))
		}
		require.Equal(t, tc.want, got, tc.reason)
	}
}
