package main

// convergeFloors are the floors converge applies to its cadences and windows
// when it reads them from the environment (core/config's Min* constants and
// core/api's MinWSKeepAlive): a value below one passes the chart's schema and
// then converge refuses to start, so the check refuses it first.
//
// This is a copy. The tools module pins the heavy tools' dependency graph
// (golangci-lint, buf, the Helm SDK), and importing converge's core/config
// would pull the server's module graph into it: go mod tidy then upgrades
// the dependencies the pinned tools are built from (x/tools, x/net,
// prometheus, cel-go, …). TestFloors_HelmcheckKeepsConvergesFloors in
// core/config (converge's module) reads this literal and fails when it
// differs from the constants; keep each value a duration string literal.
var convergeFloors = map[string]string{
	"MEMBER_HEARTBEAT_EVERY":         "1s",
	"TLS_RELOAD_INTERVAL":            "1s",
	"WORKER_SILENCE_TIMEOUT":         "3s",
	"SWEEPER_UNCLAIMED_DELETE_AFTER": "10m",
	"API_WS_KEEPALIVE":               "1s",
	"WORKER_SESSION_MAX_AGE":         "1m",
}

// convergeZeroAllowed are the floored variables for which converge also
// takes 0 (WORKER_SESSION_MAX_AGE=0 never ends a session).
var convergeZeroAllowed = map[string]bool{"WORKER_SESSION_MAX_AGE": true}
