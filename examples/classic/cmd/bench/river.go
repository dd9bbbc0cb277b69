package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/converge-run/converge/examples/stack"
)

// The River peer benchmark (a separate Go module, riverqueue/river no-op
// jobs: pre-insert N with InsertManyFast, then time a client draining them)
// runs on the same private Postgres after the measured run (so -river
// changes nothing in our figures), in a database of its own, with converge
// and the worker stopped, once autovacuum has finished with our tables
// (two minutes at most) and after a CHECKPOINT: the two figures come from
// one sitting on one server, neither paying for the other's leftovers. It
// is built from its own directory into a temporary binary; the project
// never imports it.

// riverDatabase is the peer's database on the private cluster.
const riverDatabase = "riverbench"

// buildRiver compiles the riverbench module in dir into a temporary
// binary and returns it with a clean-up.
func buildRiver(ctx context.Context, dir string) (string, func(), error) {
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", nil, fmt.Errorf("river benchmark module %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp("", "bench-riverbench-")
	if err != nil {
		return "", nil, fmt.Errorf("river build dir: %w", err)
	}
	bin := filepath.Join(tmp, "riverbench")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off") // its own module, never ours
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(tmp)
		return "", nil, fmt.Errorf("go build in %s: %w\n%s", dir, err, out)
	}
	return bin, func() { _ = os.RemoveAll(tmp) }, nil
}

type riverResult struct {
	jobsPerSec float64
	n          int
	// pgCPUPerJob is the cluster's CPU over the whole riverbench process
	// (migrate, insert, work) per job; cpuPerJob the riverbench process's
	// own.
	pgCPUPerJob, cpuPerJob float64
	line                   string
}

// runRiver runs the River benchmark (bin) with n jobs and MaxWorkers
// workers against its own database on st's cluster.
func runRiver(ctx context.Context, st *stack.Stack, bin string, n, workers int) (riverResult, error) {
	url, err := st.CreateDatabase(ctx, riverDatabase)
	if err != nil {
		return riverResult{}, err
	}
	waited, err := st.WaitAutovacuum(ctx, 2*time.Minute)
	if err != nil {
		return riverResult{}, err
	}
	if err := st.Checkpoint(ctx); err != nil {
		return riverResult{}, err
	}
	fmt.Fprintf(os.Stderr, "bench: river: waited %s for autovacuum, checkpointed\n", waited.Round(time.Millisecond))
	pgPid, err := st.PostgresPid()
	if err != nil {
		return riverResult{}, err
	}
	pgBefore, err := stack.TreeCPU(pgPid)
	if err != nil {
		return riverResult{}, err
	}
	fmt.Fprintf(os.Stderr, "bench: river: %d no-op jobs, %d workers, database %s\n", n, workers, riverDatabase)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "-n", strconv.Itoa(n), "-workers", strconv.Itoa(workers))
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return riverResult{}, fmt.Errorf("riverbench: %w\n%s%s", err, stdout.Bytes(), stderr.Bytes())
	}
	pgAfter, err := stack.TreeCPU(pgPid)
	if err != nil {
		return riverResult{}, err
	}
	res := riverResult{n: n}
	for line := range strings.Lines(stdout.String()) {
		if strings.HasPrefix(line, "river_jobs_per_sec=") {
			res.line = strings.TrimSpace(line)
		}
	}
	if res.line == "" {
		return riverResult{}, fmt.Errorf("riverbench printed no river_jobs_per_sec= line:\n%s", stdout.Bytes())
	}
	fmt.Fprintf(os.Stderr, "bench: river: %s\n", res.line)
	fields := keyValues(res.line)
	if res.jobsPerSec, err = strconv.ParseFloat(fields["river_jobs_per_sec"], 64); err != nil {
		return riverResult{}, fmt.Errorf("riverbench line %q: %w", res.line, err)
	}
	own := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	res.pgCPUPerJob = ms(pgAfter-pgBefore) / float64(n)
	res.cpuPerJob = ms(own) / float64(n)
	return res, nil
}

// keyValues splits "k=v k2=v2" into a map.
func keyValues(line string) map[string]string {
	out := map[string]string{}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			out[k] = v
		}
	}
	return out
}

// riverFields are the line's River figures: the peer's rate, our
// resources_per_sec over it, and both sides' CPU per job.
func riverFields(r riverResult, resourcesPerSec float64) string {
	return fmt.Sprintf(" river_jobs_per_sec=%.0f ratio=%.3f river_n=%d river_pg_cpu_ms_per_job=%.3f river_cpu_ms_per_job=%.3f",
		r.jobsPerSec, resourcesPerSec/r.jobsPerSec, r.n, r.pgCPUPerJob, r.cpuPerJob)
}
