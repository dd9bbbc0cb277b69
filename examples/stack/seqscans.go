package stack

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/converge-run/converge/core/store"
)

// SeqRows is how many rows Seq Scans have read since the cluster started,
// from each of the tables a fleet grows and the outbox's partitions.
type SeqRows struct {
	// Tables is each table's scans and rows, by name: which one a trap
	// scans.
	Tables map[string]TableScans
}

// TableScans is one table's Seq Scans and the rows they read.
type TableScans = store.TableScans

// Fleet is the rows read from resources, its phase and label rows, the
// edges and the queue's partitions. Every hot statement probes those by
// key, so a plan that scans one of them shows here as millions of rows
// where a healthy run reads a handful.
func (s SeqRows) Fleet() int64 { return s.sum(func(name string) bool { return !isOutbox(name) }) }

// Outbox is the rows read from the outbox's partitions. They hold the
// results not yet drained, a backlog the claims' pacing bounds, and the
// drain's pop takes every row of a partition of a few pages by a scan when
// that is the cheap plan (planned per call): a 1M run reads about half a row
// a leaf here, some 70 rows a scan, as the pops it is made of.
func (s SeqRows) Outbox() int64 { return s.sum(isOutbox) }

func isOutbox(table string) bool { return strings.HasPrefix(table, "work_outbox_p") }

func (s SeqRows) sum(in func(table string) bool) int64 {
	var n int64
	for name, t := range s.Tables {
		if in(name) {
			n += t.Rows
		}
	}
	return n
}

// Sub is the rows read between an earlier reading b and s.
func (s SeqRows) Sub(b SeqRows) SeqRows {
	d := SeqRows{Tables: make(map[string]TableScans, len(s.Tables))}
	for name, t := range s.Tables {
		d.Tables[name] = TableScans{Scans: t.Scans - b.Tables[name].Scans, Rows: t.Rows - b.Tables[name].Rows}
	}
	return d
}

// Over is the tables whose Seq Scans read floor rows or more, the most
// rows first.
func (s SeqRows) Over(floor int64) []string {
	var names []string
	for name, t := range s.Tables {
		if t.Rows >= floor {
			names = append(names, name)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(s.Tables[b].Rows, s.Tables[a].Rows), cmp.Compare(a, b))
	})
	return names
}

// SeqRowsRead reads the Seq Scan counters of the fleet's tables and the
// outbox (the catalog-sized tables beside them are left out: scanning those
// is the cheap plan). The counters are the server's cumulative statistics,
// which a busy backend flushes at most once a second and an idle one within
// ten seconds, so a read taken just after a run may miss its last seconds.
func (s *Stack) SeqRowsRead(ctx context.Context) (SeqRows, error) {
	tables, err := s.Store.FleetSeqScans(ctx)
	if err != nil {
		return SeqRows{}, err
	}
	return SeqRows{Tables: tables}, nil
}

// BuffersTouched is how many buffers the database's backends have read
// since the cluster started — found in shared buffers or read in
// (pg_stat_database's blks_hit + blks_read) — flushed as the Seq Scan
// counters are. Over a window, divided by its rows, it is a trap's other
// signature: a plan that probes an index by the wrong columns reads no row
// by a Seq Scan and yet hundreds of pages a row.
func (s *Stack) BuffersTouched(ctx context.Context) (int64, error) {
	return s.Store.BuffersTouched(ctx)
}

// WAL is what the cluster has written to its write-ahead log since it
// started (pg_stat_wal): every process's — backends, autovacuum, the
// checkpointer — as every write a run causes is in it.
type WAL struct {
	// Records are the log's records: one per heap row written or locked,
	// one per index entry, one per commit, and so on.
	Records int64
	// FPI are full-page images: the first change to a page after a
	// checkpoint logs the whole page.
	FPI int64
	// Bytes is the log's size, images included.
	Bytes int64
}

// Sub is what was written between an earlier reading b and w.
func (w WAL) Sub(b WAL) WAL {
	return WAL{Records: w.Records - b.Records, FPI: w.FPI - b.FPI, Bytes: w.Bytes - b.Bytes}
}

// WALWritten reads the cluster's write-ahead log counters. Backends count
// their records as they insert them and publish them with their other
// statistics, as the Seq Scan counters are.
func (s *Stack) WALWritten(ctx context.Context) (WAL, error) {
	w, err := s.Store.WALWritten(ctx)
	return WAL(w), err
}
