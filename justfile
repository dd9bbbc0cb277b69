# Everyday recipes. `just --list` shows them all.
# just is not a Debian package: `npm i -g rust-just` installs it.

version := `git describe --tags --always --dirty 2>/dev/null || echo dev`

# List the recipes.
default:
    @just --list

# Regenerate every generated file (committed; CI fails on a diff).
generate: frontend-generate ts-generate
    go generate ./...

# Build the binaries into ./bin, stamped with the git version.
build:
    mkdir -p bin
    go build -ldflags "-X main.BuildVersion={{version}}" -o bin/ ./cmd/...

# The dashboard's Vitest suite, then the Go suite (real Postgres; browser tests need Debian's chromium).
test *ARGS: frontend-test
    go test {{ARGS}} ./...

# golangci-lint with .golangci.yml (the tool is pinned in tools/go.mod), e.g. `just lint ./core/worker/...`.
lint *ARGS="./...":
    go tool -modfile=tools/go.mod golangci-lint run {{ARGS}}

# Everything CI runs.
ci:
    bash .ci/run

# The local stack: private Postgres, converge, the demo worker and a sample bom (see README).
dev *ARGS:
    go run ./cmd/devstack {{ARGS}}

# Store list/count latency at ROWS resources (default 1M).
bench-store ROWS="1000000":
    BENCH_ROWS={{ROWS}} go test ./core/store -run '^$' -bench '^BenchmarkStore$' -benchtime 1x -timeout 60m

# The database ceiling: compose → schedule → claim → outbox → drain from Go, N resources.
bench-sched N="100000":
    BENCH_N={{N}} go test ./core/store/pipeline -run '^$' -bench '^BenchmarkSched$' -benchtime 1x -timeout 60m

# Reactor delivery from the store's side: a backlog of N deliveries claimed and acked as a broker does.
bench-delivery N="20000":
    BENCH_N={{N}} go test ./core/store/lifecycle -run '^$' -bench '^BenchmarkDelivery$' -benchtime 1x -timeout 60m

# End to end: N leaves under bom roots through real converge and worker processes; one line of rates, tail, CPU per leaf, RSS.
bench N="10000" *ARGS:
    go run ./examples/classic/cmd/bench -n {{N}} {{ARGS}}

# The River peer benchmark (a separate module, built into a temp binary, never imported).
riverbench_dir := env_var_or_default("RIVERBENCH_DIR", "/work/shared/peers/riverbench")

# `just bench N`, then River's no-op jobs on the same private Postgres: adds river_jobs_per_sec and ratio.
bench-river N="10000" *ARGS:
    go run ./examples/classic/cmd/bench -n {{N}} -river {{riverbench_dir}} {{ARGS}}

# The GraphQL API over HTTP and websocket at ROWS resources (default 1M): page
# p50/p99 (first, deep, phase-filtered) and commit→frame latency for 1,000 subscribers.
bench-api ROWS="1000000":
    BENCH_ROWS={{ROWS}} go test ./core/api -run '^$' -bench '^BenchmarkAPI$' -benchtime 1x -timeout 60m

# Every fuzz target for BUDGET each (CI runs 10s); commit the crashers it keeps under testdata/fuzz/.
fuzz BUDGET="2m":
    bash .ci/fuzz {{BUDGET}}

# Every benchmark available, at size N.
bench-all N="100000": (bench-sched N) (bench-store N) (bench N)

# Install the dashboard's npm packages from the lockfile (when missing or older than it).
frontend-deps:
    cd frontend && { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; }

# The dashboard's typed GraphQL documents (from graph/schema) and its built dist/ (embedded).
frontend-generate: frontend-deps
    cd frontend && npm run codegen && npm run build

# The dashboard's unit and component tests (Vitest).
frontend-test: frontend-deps
    cd frontend && npm test

# The dashboard with hot reload on :5173, proxying /graphql to a converge at CONVERGE_API (default :8080).
frontend-dev: frontend-deps
    cd frontend && npm run dev

# Every browser test (Chromium via chromedp: dashboard, cluster page, 1,001-node graph, demos); screenshots in .artifacts/screenshots.
browser-test *ARGS:
    CONVERGE_REQUIRE_BROWSER=1 go test -count=1 -timeout 30m -v {{ARGS}} ./frontend/browsertest

# conctl against CONVERGE_SERVER (default http://localhost:8080), e.g. `just conctl get res --phase failed`.
conctl *ARGS:
    go run -ldflags "-X main.BuildVersion={{version}}" ./cmd/conctl {{ARGS}}

# Regenerate only conctl's genqlient client (from graph/schema) and docs/cli.md.
generate-cli:
    go generate ./cli

# conctl's suite under the race detector (a real converge, worker and Postgres).
test-cli *ARGS:
    go test -race {{ARGS}} ./cli/...

# OCI images of converge, stdworker and the classic demo worker, without Docker (tools/images):
# an OCI layout in .artifacts/images/oci and NAME.tar per image, each opened and verified after writing.
images *ARGS:
    cd tools && go run ./images -root .. -out ../.artifacts/images -version {{version}} {{ARGS}}

# The Helm chart checked without a cluster (tools/helmcheck): each ci/*-values.yaml rendered with the
# Helm SDK, decoded strictly into k8s.io/api types, and its invariants asserted. `just helm-check -print FILE` shows the objects.
helm-check *ARGS:
    cd tools && go run ./helmcheck -chart ../deploy/helm/converge -root .. {{ARGS}}

# The fault suite on real processes (private Postgres, 2 controls, 3 brokers, 4 workers, a TCP proxy of ours on every link): one line per fault with the time it added, four invariants checked.
chaos N="300":
    go run ./examples/chaos -n {{N}}

# Install the TypeScript worker SDK's npm packages from the lockfile (when missing or older than it).
ts-deps:
    cd workerproto/ts && { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; }

# The TypeScript worker SDK's generated protocol code (protoc-gen-es via buf, workerproto/buf.gen.ts.yaml).
ts-generate: ts-deps
    cd workerproto/ts && npm run generate

# The TypeScript worker SDK: typecheck, its node:test suite, and its end-to-end test against a real converge.
ts-test: ts-deps
    cd workerproto/ts && npm run typecheck && npm test
    go test -count=1 ./workerproto/ts
