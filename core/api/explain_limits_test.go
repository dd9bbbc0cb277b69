package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Resource.specHistory reads up to `first` full specs a resource, and
// Resource.waitingOn runs the explanation's statements a resource: in a
// page of resources each costs its size, so the complexity limit
// (API_MAX_COMPLEXITY, default 25,000) bounds what one request reads.
func TestLimits_ExplainAndHistoryCostWhatTheyRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := map[string]struct {
		reason string
		query  string
		refuse bool
	}{
		"HistoryOfAPage": {"500 resources × 1000 kept specs",
			`{ resources(first: 500) { items { specHistory(first: 1000) { generation spec } } } }`, true},
		"WhyOfAPage": {"500 explanations, each a few statements and up to 20 blockers a gate",
			`{ resources(first: 500) { items { waitingOn { gate blockers { id name } } } } }`, true},
		"HistoryOfOne": {"one resource's whole history is an ordinary read",
			`{ resource(kind: "x", name: "y") { specHistory(first: 1000) { generation spec labels reason actor createdAt } } }`, false},
		"WhyOfOne": {"conctl why",
			`{ resource(kind: "x", name: "y") { waitingOn { gate message since until blockerCount blockers { kind name phase } inFlight cap brokerId } } }`, false},
		"WhyOfAListPage": {"a page of 50 with its gates",
			`{ resources(first: 50) { items { waitingOn { gate message } } } }`, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := e.do("", tc.query, nil)
			if !tc.refuse {
				for _, err := range r.Errors {
					require.NotEqual(t, "complexity", err.Extensions["limit"], "%s: %v", tc.reason, err.Message)
				}
				return
			}
			require.NotEmpty(t, r.Errors, tc.reason)
			require.Equal(t, "complexity", r.Errors[0].Extensions["limit"], "%s: %+v", tc.reason, r.Errors)
		})
	}
}
