package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/converge-run/converge/examples/stack"
)

// usage is what the stack spent in the measured window, sampled from
// /proc around it (the window's figures from the database's timestamps
// are measure's).
type usage struct {
	cpu     stack.CPU     // Postgres' process tree, converge, the worker
	calls   [2]int64      // converge, worker: I/O system calls (reads + writes)
	wall    time.Duration // the window on this process's clock
	polls   int           // probe reads
	probe   float64       // ms of the probe backend's CPU (NaN: not attributable)
	peakMB  [2]float64    // converge, worker: VmHWM at the end
	endMB   [2]float64    // converge, worker: VmRSS at the end
	meanMB  [2]float64    // converge, worker: VmRSS averaged over the window (rssSampler)
	seqRows stack.SeqRows // rows Seq Scans read from the growing tables and the outbox
	buffers int64         // buffers the database's backends touched
	wal     stack.WAL     // the write-ahead log the cluster wrote
}

// runWindow is the measured window: from just before the first root's
// apply until the probe has seen every root READY, with CPU sampled at
// both ends (and the top statements printed, with -statements).
func runWindow(ctx context.Context, st *stack.Stack, p params, roots, n int, spec json.RawMessage) (usage, error) {
	var u usage
	pr, err := openProbe(ctx, st.DatabaseURL)
	if err != nil {
		return u, err
	}
	defer pr.close()
	if p.statements > 0 {
		if err := st.ResetStatements(ctx); err != nil {
			return u, err
		}
	}
	before, err := readCounters(ctx, st)
	if err != nil {
		return u, err
	}
	probeBefore, err := pr.cpu()
	if err != nil {
		return u, err
	}
	convergeCalls, workerCalls, err := st.IOCalls()
	if err != nil {
		return u, err
	}
	started := time.Now()
	rss := sampleRSS(ctx, st)
	if err := applyRoots(ctx, st, roots, spec); err != nil {
		rss.means()
		return u, err
	}
	err = pr.waitRoots(ctx, st, roots, p.poll, started)
	u.meanMB[0], u.meanMB[1] = rss.means()
	if err != nil {
		return u, err
	}
	after, err := readCounters(ctx, st)
	if err != nil {
		return u, err
	}
	convergeAfter, workerAfter, err := st.IOCalls()
	if err != nil {
		return u, err
	}
	u.wall = time.Since(started)
	d := after.sub(before)
	u.cpu, u.seqRows, u.buffers, u.wal = d.cpu, d.seq, d.buffers, d.wal
	for i, d := range []stack.IOCalls{convergeAfter.Sub(convergeCalls), workerAfter.Sub(workerCalls)} {
		u.calls[i] = d.Reads + d.Writes
	}
	u.polls, u.probe = pr.polls, pr.cpuSince(ctx, probeBefore)
	printSeqScans(u.seqRows, n, "")
	if p.statements > 0 {
		if err := printStatements(ctx, st, p.statements, n, ""); err != nil {
			return u, err
		}
	}
	if u.peakMB[0], u.peakMB[1], err = st.PeakRSSMB(); err != nil {
		return u, err
	}
	if u.endMB[0], u.endMB[1], err = st.RSSMB(); err != nil {
		return u, err
	}
	return u, nil
}

// formatLine is the bench: line (River's fields are appended to it).
func formatLine(n int, res result, u usage, h hostSpeed) string {
	perLeaf := func(d time.Duration) float64 { return ms(d) / float64(n) }
	return fmt.Sprintf("bench: n=%d resources_per_sec=%.1f ready_p50_ms=%.1f ready_p99_ms=%.1f rollup_ms=%.1f converge_rss_mb=%.1f worker_rss_mb=%.1f"+
		" leaf_per_sec=%.1f tail_ms=%.1f pg_cpu_ms_per_leaf=%.3f converge_cpu_ms_per_leaf=%.3f worker_cpu_ms_per_leaf=%.3f"+
		" first_leaf_ms=%.1f cpu_cores=%.2f converge_rss_end_mb=%.1f worker_rss_end_mb=%.1f probe_polls=%d probe_pg_cpu_ms=%.1f"+
		" converge_io_calls_per_leaf=%.2f worker_io_calls_per_leaf=%.2f converge_rss_mean_mb=%.1f worker_rss_mean_mb=%.1f"+
		" host_syscall_us=%.2f host_rtt_us=%.1f seq_rows_per_leaf=%.2f outbox_seq_rows_per_leaf=%.2f pg_buffers_per_leaf=%.1f"+
		" wal_bytes_per_leaf=%.0f wal_records_per_leaf=%.2f",
		n, res.rate, res.p50, res.p99, res.rollup, u.peakMB[0], u.peakMB[1],
		res.leafRate, res.tail, perLeaf(u.cpu.Postgres), perLeaf(u.cpu.Converge), perLeaf(u.cpu.Worker),
		res.firstLeaf, (u.cpu.Postgres+u.cpu.Converge+u.cpu.Worker).Seconds()/u.wall.Seconds(),
		u.endMB[0], u.endMB[1], u.polls, u.probe,
		float64(u.calls[0])/float64(n), float64(u.calls[1])/float64(n), u.meanMB[0], u.meanMB[1],
		h.syscallUS, h.rttUS, float64(u.seqRows.Fleet())/float64(n), float64(u.seqRows.Outbox())/float64(n),
		float64(u.buffers)/float64(n), float64(u.wal.Bytes)/float64(n), float64(u.wal.Records)/float64(n))
}

// printStatements prints the top statements of the measured window, one
// bench-stmt: line each, and their totals: server-side wall time per leaf
// (not CPU: waits are included). A nested statement (level=nested) ran
// inside a function, and its time is also in its caller's. A follow-up
// window's lines (the rollout's, the teardown's) name it after the prefix,
// as "bench-stmt: window=teardown …", and divide by that window's n.
func printStatements(ctx context.Context, st *stack.Stack, top, n int, window string) error {
	stats, err := st.Statements(ctx)
	if err != nil {
		return err
	}
	perLeaf := func(d time.Duration) float64 { return ms(d) / float64(n) }
	var exec, plan time.Duration
	var calls int64
	for _, s := range stats {
		if s.TopLevel {
			exec, plan, calls = exec+s.Exec, plan+s.Plan, calls+s.Calls
		}
	}
	prefix := "bench-stmt:"
	if window != "" {
		prefix += " window=" + window
	}
	fmt.Printf(prefix+" total level=top exec_ms_per_leaf=%.3f plan_ms_per_leaf=%.3f calls=%d statements=%d\n",
		perLeaf(exec), perLeaf(plan), calls, len(stats))
	for i, s := range stats[:min(top, len(stats))] {
		level := "top"
		if !s.TopLevel {
			level = "nested"
		}
		q := s.Query
		if len(q) > 160 {
			q = q[:160] + "…"
		}
		fmt.Printf(prefix+" %d level=%s exec_ms_per_leaf=%.3f plan_ms_per_leaf=%.3f calls=%d rows=%d buffers_per_call=%.1f buffers_per_leaf=%.2f wal_bytes_per_leaf=%.1f query=%s\n",
			i+1, level, perLeaf(s.Exec), perLeaf(s.Plan), s.Calls, s.Rows,
			float64(s.Buffers)/float64(max(s.Calls, 1)), float64(s.Buffers)/float64(n), float64(s.WALBytes)/float64(n), q)
	}
	return nil
}
