package api

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// MinWSKeepAlive is the shortest API_WS_KEEPALIVE: the keepalive is a
// period every websocket repeats, and a tiny one has each connection ping in
// a loop.
const MinWSKeepAlive = time.Second

// Limits bound what one request or connection may cost. Zero fields take
// the defaults below; LimitsFromEnv reads them from API_* variables.
type Limits struct {
	// Complexity is the most a query may cost: 1 per field, list fields
	// multiplied by their page size (default 25,000; API_MAX_COMPLEXITY).
	Complexity int
	// Depth is the deepest selection nesting, introspection excluded
	// (default 12; API_MAX_DEPTH); counting introspection an operation may
	// nest 12 levels more (GraphiQL's introspection query).
	Depth int
	// Aliases caps the aliased fields of one operation: each alias runs its
	// resolver once more (default 100; API_MAX_ALIASES).
	Aliases int
	// IntrospectionCost is what each __schema or __type field adds to an
	// operation's complexity (default 1000; API_INTROSPECTION_COST).
	IntrospectionCost int
	// Tokens caps the lexical tokens of one query document, checked while
	// parsing (default 20,000; API_MAX_TOKENS).
	Tokens int
	// QueryCacheBytes bounds the parsed-query cache (estimated document
	// bytes; default 32 MiB; API_QUERY_CACHE_BYTES). Only queries that passed
	// every limit are cached.
	QueryCacheBytes int64
	// BodyBytes caps an HTTP request body (default 1 MiB; API_MAX_BODY_BYTES).
	BodyBytes int64
	// WSPayloadBytes caps one websocket message from a client (default
	// 256 KiB; API_WS_MAX_PAYLOAD_BYTES).
	WSPayloadBytes int64
	// SubscriptionsPerConn caps the live subscriptions of one websocket
	// connection (default 100; API_WS_MAX_SUBSCRIPTIONS).
	SubscriptionsPerConn int
	// OperationsPerConn caps the queries and mutations one websocket
	// connection runs at once (default 16; API_WS_MAX_OPERATIONS): each is
	// a goroutine holding its response until the client reads it. A
	// connection reads no further message while SubscriptionsPerConn +
	// OperationsPerConn of its operations are unfinished, refused ones
	// included, so a client that sends without reading stalls itself.
	OperationsPerConn int
	// KeepAlive is the websocket keep-alive period: a ping frame (and, on
	// graphql-ws, a "ka" message) every KeepAlive; a missing pong is
	// tolerated (default 20s; API_WS_KEEPALIVE, at least MinWSKeepAlive).
	KeepAlive time.Duration
	// InitTimeout is how long a websocket may take to send connection_init
	// (default 10s; API_WS_INIT_TIMEOUT).
	InitTimeout time.Duration
	// RequestTimeout bounds one query or mutation, over HTTP (the request
	// body's arrival included) or a websocket (default 30s;
	// API_REQUEST_TIMEOUT).
	RequestTimeout time.Duration
	// AllowedOrigins are the browser origins (host patterns, path.Match
	// syntax: "dashboard.example.com", "localhost:*") allowed besides the
	// API's own, for websocket upgrades and CORS (default none: same-origin
	// only; API_ALLOWED_ORIGINS, comma-separated).
	AllowedOrigins []string
	// LoaderWait is how long a dataloader collects keys (default 2ms;
	// API_LOADER_WAIT).
	LoaderWait time.Duration
}

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def64 := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	dur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.Complexity, 25000)
	def(&l.Depth, 12)
	def(&l.Aliases, 100)
	def(&l.IntrospectionCost, 1000)
	def(&l.Tokens, 20000)
	def64(&l.QueryCacheBytes, 32<<20)
	def64(&l.BodyBytes, 1<<20)
	def64(&l.WSPayloadBytes, 256<<10)
	def(&l.SubscriptionsPerConn, 100)
	def(&l.OperationsPerConn, 16)
	dur(&l.KeepAlive, 20*time.Second)
	dur(&l.InitTimeout, 10*time.Second)
	dur(&l.RequestTimeout, 30*time.Second)
	dur(&l.LoaderWait, 2*time.Millisecond)
	return l
}

// LimitsFromEnv reads the API_* variables through getenv; unset ones keep
// their defaults.
func LimitsFromEnv(getenv func(string) string) (Limits, error) {
	var l Limits
	ints := []struct {
		name string
		dst  *int
	}{{"API_MAX_COMPLEXITY", &l.Complexity}, {"API_MAX_DEPTH", &l.Depth}, {"API_WS_MAX_SUBSCRIPTIONS", &l.SubscriptionsPerConn},
		{"API_WS_MAX_OPERATIONS", &l.OperationsPerConn}, {"API_MAX_ALIASES", &l.Aliases},
		{"API_INTROSPECTION_COST", &l.IntrospectionCost}, {"API_MAX_TOKENS", &l.Tokens}}
	for _, f := range ints {
		if v := getenv(f.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return Limits{}, fmt.Errorf("%s: want a positive integer, got %q", f.name, v)
			}
			*f.dst = n
		}
	}
	sizes := []struct {
		name string
		dst  *int64
	}{{"API_MAX_BODY_BYTES", &l.BodyBytes}, {"API_WS_MAX_PAYLOAD_BYTES", &l.WSPayloadBytes},
		{"API_QUERY_CACHE_BYTES", &l.QueryCacheBytes}}
	for _, f := range sizes {
		if v := getenv(f.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return Limits{}, fmt.Errorf("%s: want a positive byte count, got %q", f.name, v)
			}
			*f.dst = n
		}
	}
	// The keepalive is a period every websocket repeats: 1ns would have
	// each connection ping in a loop. The others are waits, where a tiny
	// one only refuses sooner.
	durs := []struct {
		name  string
		dst   *time.Duration
		floor time.Duration
	}{{"API_WS_KEEPALIVE", &l.KeepAlive, MinWSKeepAlive}, {"API_WS_INIT_TIMEOUT", &l.InitTimeout, 0},
		{"API_REQUEST_TIMEOUT", &l.RequestTimeout, 0}, {"API_LOADER_WAIT", &l.LoaderWait, 0}}
	for _, f := range durs {
		if v := getenv(f.name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return Limits{}, fmt.Errorf("%s: want a positive duration (20s), got %q", f.name, v)
			}
			if d < f.floor {
				return Limits{}, fmt.Errorf("%s=%q: want at least %s", f.name, v, f.floor)
			}
			*f.dst = d
		}
	}
	if v := getenv("API_ALLOWED_ORIGINS"); v != "" {
		for _, p := range strings.Split(v, ",") {
			p = strings.TrimSpace(p)
			if p == "" {
				continue
			}
			if _, err := path.Match(p, ""); err != nil {
				return Limits{}, fmt.Errorf("API_ALLOWED_ORIGINS: bad pattern %q: %w", p, err)
			}
			l.AllowedOrigins = append(l.AllowedOrigins, p)
		}
	}
	return l, nil
}

func pathMatch(pattern, name string) (bool, error) { return path.Match(pattern, name) }
