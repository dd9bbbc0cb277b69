package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/Khan/genqlient/graphql"
	"github.com/stretchr/testify/require"
)

// gqlFn answers genqlient requests by operation name with a data document.
type gqlFn func(op string) string

func (f gqlFn) MakeRequest(_ context.Context, req *graphql.Request, resp *graphql.Response) error {
	return json.Unmarshal([]byte(f(req.OpName)), resp.Data)
}

func row(id, phase string, terminal bool) string {
	return fmt.Sprintf(`{"id":%q,"kind":"account","name":%q,"phase":%q,"failureTerminal":%t,"generation":1,"syncedGeneration":1,
		"updatedAt":"2026-01-01T00:00:00Z","createdAt":"2026-01-01T00:00:00Z","conditions":[],"dependencies":[]}`, id, id, phase, terminal)
}

func waitRow(t *testing.T, doc string) WaitRow {
	t.Helper()
	var r WaitRow
	require.NoError(t, json.Unmarshal([]byte(doc), &r))
	return r
}

// The verdict and the final line must come from one read of the subtree:
// root and child events travel on separate subscriptions, so the follower's
// state can pair a READY root with a child's older row.
func TestFollowerSettle_DecidesFromOneReadOfTheSubtree(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason    string
		root      string
		children  []string
		fresh     bool
		server    gqlFn
		wantDone  bool
		wantFinal string
	}{
		"StaleChildBehindAReadyRoot": {
			reason:   "a READY root with a child still RECONCILING in the follower's state is re-read before the wait ends",
			root:     row("root", "READY", false),
			children: []string{row("a", "READY", false), row("b", "READY", false), row("c", "READY", false), row("d", "RECONCILING", false)},
			server: func(op string) string {
				if op == "WaitTarget" {
					return `{"resource":` + row("root", "READY", false) + `}`
				}
				return `{"resources":{"items":[` + strings.Join([]string{row("a", "READY", false), row("b", "READY", false),
					row("c", "READY", false), row("d", "READY", false)}, ",") + `],"nextCursor":null}}`
			},
			wantDone: true, wantFinal: " (4/4 children ready)",
		},
		"StaleFailureThatWasRetried": {
			reason:   "a terminal failure seen on an old row does not end the wait when the fresh read shows it in flight",
			root:     row("root", "RECONCILING", false),
			children: []string{row("a", "FAILED", true), row("b", "READY", false)},
			server: func(op string) string {
				if op == "WaitTarget" {
					return `{"resource":` + row("root", "RECONCILING", false) + `}`
				}
				return `{"resources":{"items":[` + row("a", "RECONCILING", false) + "," + row("b", "READY", false) + `],"nextCursor":null}}`
			},
			wantDone: false,
		},
		"FreshReadIsTrusted": {
			reason:   "the state just read (root first) is decided on without another read",
			root:     row("root", "READY", false),
			children: []string{row("a", "READY", false)},
			fresh:    true,
			server:   func(string) string { panic("no read expected") },
			wantDone: true, wantFinal: " (1/1 children ready)",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := &follower{c: &Conn{GQL: tc.server}, target: ref{kind: "bom", name: "x"},
				root: waitRow(t, tc.root), children: map[string]WaitRow{}, reported: map[string]string{}}
			for _, c := range tc.children {
				r := waitRow(t, c)
				f.children[r.Id] = r
			}
			done, err, rerr := f.settle(context.Background(), tc.fresh)
			require.NoError(t, rerr)
			require.Equal(t, tc.wantDone, done, tc.reason)
			require.NoError(t, err, tc.reason)
			if tc.wantFinal != "" {
				require.Equal(t, tc.wantFinal, f.summary(), tc.reason)
			}
		})
	}
}
