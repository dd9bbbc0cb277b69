package main

import (
	"context"
	"fmt"
	"time"

	"github.com/converge-run/converge/examples/stack"
)

// counters are what a window reads at both ends: the three processes' CPU,
// the rows Seq Scans read, the buffers the database's backends touched and
// the write-ahead log the cluster wrote.
type counters struct {
	cpu     stack.CPU
	seq     stack.SeqRows
	buffers int64
	wal     stack.WAL
}

func readCounters(ctx context.Context, st *stack.Stack) (counters, error) {
	var c counters
	var err error
	if c.cpu, err = st.CPU(); err != nil {
		return c, err
	}
	if c.seq, err = st.SeqRowsRead(ctx); err != nil {
		return c, err
	}
	if c.buffers, err = st.BuffersTouched(ctx); err != nil {
		return c, err
	}
	c.wal, err = st.WALWritten(ctx)
	return c, err
}

func (c counters) sub(b counters) counters {
	return counters{cpu: c.cpu.Sub(b.cpu), seq: c.seq.Sub(b.seq), buffers: c.buffers - b.buffers, wal: c.wal.Sub(b.wal)}
}

// printSeqScans prints a bench-seq: line for each fleet or outbox table
// whose Seq Scans read a tenth of a row a leaf or more over a window — in a
// healthy run none does (the outbox's pops read about half a row a leaf
// over all sixteen partitions) — so a trap names its table:
//
//	bench-seq: [window=<name>] table=<t> seq_scans=<n> rows=<n> rows_per_leaf=<f>
func printSeqScans(seq stack.SeqRows, n int, window string) {
	prefix := "bench-seq:"
	if window != "" {
		prefix += " window=" + window
	}
	for _, name := range seq.Over(int64(max(n/10, 1))) {
		t := seq.Tables[name]
		fmt.Printf("%s table=%s seq_scans=%d rows=%d rows_per_leaf=%.2f\n", prefix, name, t.Scans, t.Rows, float64(t.Rows)/float64(n))
	}
}

// followUp measures one window after the measured run (the rollout's, the
// teardown's): with -statements the statement totals are reset at its start
// and its top statements printed at its end; run does the window's work and
// returns once it is over. The line it returns:
//
//	bench-<name>: n=<n> resources_per_sec=<f> wall_ms=<f> pg_cpu_ms_per_resource=<f>
//	  converge_cpu_ms_per_resource=<f> worker_cpu_ms_per_resource=<f> cpu_cores=<f>
//	  seq_rows_per_resource=<f> pg_buffers_per_resource=<f> wal_bytes_per_resource=<f>
//	  wal_records_per_resource=<f>
//
// (one line; wrapped here): the CPU figures are the three processes' over
// the window, seq_rows_per_resource the rows Seq Scans read from the
// fleet's tables, pg_buffers_per_resource the buffers the database's
// backends touched and wal_* the write-ahead log the cluster wrote, each
// divided by n. A table a Seq Scan read much of is named on a bench-seq:
// line before it (printSeqScans).
func followUp(ctx context.Context, st *stack.Stack, p params, name string, n int, run func(started time.Time) error) (string, error) {
	if p.statements > 0 {
		if err := st.ResetStatements(ctx); err != nil {
			return "", err
		}
	}
	before, err := readCounters(ctx, st)
	if err != nil {
		return "", err
	}
	started := time.Now()
	if err := run(started); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	wall := time.Since(started)
	after, err := readCounters(ctx, st)
	if err != nil {
		return "", err
	}
	if p.statements > 0 {
		if err := printStatements(ctx, st, p.statements, n, name); err != nil {
			return "", err
		}
	}
	d := after.sub(before)
	printSeqScans(d.seq, n, name)
	per := func(d time.Duration) float64 { return ms(d) / float64(n) }
	return fmt.Sprintf("bench-%s: n=%d resources_per_sec=%.1f wall_ms=%.1f pg_cpu_ms_per_resource=%.3f"+
		" converge_cpu_ms_per_resource=%.3f worker_cpu_ms_per_resource=%.3f cpu_cores=%.2f seq_rows_per_resource=%.2f"+
		" pg_buffers_per_resource=%.1f wal_bytes_per_resource=%.0f wal_records_per_resource=%.2f",
		name, n, float64(n)/wall.Seconds(), ms(wall), per(d.cpu.Postgres), per(d.cpu.Converge), per(d.cpu.Worker),
		(d.cpu.Postgres+d.cpu.Converge+d.cpu.Worker).Seconds()/wall.Seconds(),
		float64(d.seq.Fleet())/float64(n), float64(d.buffers)/float64(n),
		float64(d.wal.Bytes)/float64(n), float64(d.wal.Records)/float64(n)), nil
}
