# Everyday recipes. `just --list` shows them all.
# just is not a Debian package: `npm i -g rust-just` installs it.

version := `git describe --tags --always --dirty 2>/dev/null || echo dev`

# List the recipes.
default:
    @just --list

# Regenerate every generated file (committed; CI fails on a diff).
generate:
    go generate ./...

# Build the binaries into ./bin, stamped with the git version.
build:
    mkdir -p bin
    go build -ldflags "-X main.BuildVersion={{version}}" -o bin/ ./cmd/...

# The full Go test suite (real Postgres, started by the tests themselves).
test *ARGS:
    go test {{ARGS}} ./...

# Everything CI runs.
ci:
    bash .ci/run

# The local stack: private Postgres, migrated (see README).
dev *ARGS:
    go run ./cmd/devstack {{ARGS}}

# Store list/count latency at ROWS resources (default 1M).
bench-store ROWS="1000000":
    BENCH_ROWS={{ROWS}} go test ./core/store -run '^$' -bench '^BenchmarkStore$' -benchtime 1x -timeout 60m

# The database ceiling: compose → schedule → claim → outbox → drain from Go, N resources.
bench-sched N="100000":
    BENCH_N={{N}} go test ./core/store/pipeline -run '^$' -bench '^BenchmarkSched$' -benchtime 1x -timeout 60m

# Every benchmark available, at size N.
bench N="100000": (bench-sched N) (bench-store N)
