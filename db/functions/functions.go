// Package functions embeds the function set: every SQL and plpgsql function
// and trigger function of the schema, one per file (<name>.sql), each with a
// comment block that says what it gates and why.
//
// The migrate runner (db/migrate) applies the set in file-name order, with
// CREATE OR REPLACE: the functions a database does not have yet before the
// versioned DDL of db/migrations (which may name them), every changed body
// after it (so a body never runs over a schema older than its own). The set
// carries a version: the last line of the append-only ledger in VERSION. A
// database records the version it runs (converge_function_set) and only ever
// moves forward, so during a rolling update an older binary never replaces
// newer function bodies. Whoever changes a function file appends the next
// version and the new checksum to VERSION; TestLedger_MatchesFiles fails
// until they do.
//
// The set is applied before the tables exist on a fresh database, so a
// signature names only built-in types (a batch of rows travels as anyarray).
// CREATE OR REPLACE changes a body, never a signature: a function removed or
// given new argument types leaves its old definition behind, which the next
// versioned migration drops; a new return
// type needs the old function dropped first, at the top of its file.
package functions

import (
	"bufio"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

//go:embed *.sql VERSION
var embedded embed.FS

// LedgerFile is the name of the version ledger beside the function files.
const LedgerFile = "VERSION"

// File is one function's definition.
type File struct {
	Name string // file name, e.g. "drain_outbox_range.sql"
	SQL  string
}

// Set is a versioned function set.
type Set struct {
	// Version is the ledger's last version: what this set claims to be.
	Version int64
	// Checksum is computed from the files (Sum), not read from the ledger.
	Checksum string
	// LedgerChecksum is the checksum the ledger records for Version; it
	// differs from Checksum when a file changed without a new ledger line.
	LedgerChecksum string
	// Files in apply order (by name).
	Files []File
}

// Embedded is the function set compiled into this binary.
func Embedded() (Set, error) { return Load(embedded) }

// Load reads a function set from fsys: every *.sql file at its root and the
// VERSION ledger.
func Load(fsys fs.FS) (Set, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return Set{}, fmt.Errorf("list function files: %w", err)
	}
	sort.Strings(names)
	var s Set
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return Set{}, fmt.Errorf("read function file %s: %w", n, err)
		}
		s.Files = append(s.Files, File{Name: path.Base(n), SQL: string(b)})
	}
	s.Checksum = Sum(s.Files)
	ledger, err := fs.ReadFile(fsys, LedgerFile)
	if err != nil {
		return Set{}, fmt.Errorf("read function set ledger: %w", err)
	}
	entries, err := ParseLedger(string(ledger))
	if err != nil {
		return Set{}, err
	}
	last := entries[len(entries)-1]
	s.Version, s.LedgerChecksum = last.Version, last.Checksum
	return s, nil
}

// Sum is the checksum of a set of files: SHA-256 over each file's name and
// content, in the given order.
func Sum(files []File) string {
	h := sha256.New()
	for _, f := range files {
		h.Write([]byte(f.Name))
		h.Write([]byte{0})
		h.Write([]byte(f.SQL))
		h.Write([]byte{0})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// LedgerEntry is one line of the ledger: a version and its checksum.
type LedgerEntry struct {
	Version  int64
	Checksum string
}

// ParseLedger parses VERSION: one "<version> <checksum>" per line, '#'
// comments and blank lines ignored, versions 1, 2, 3, … in order.
func ParseLedger(text string) ([]LedgerEntry, error) {
	var out []LedgerEntry
	sc := bufio.NewScanner(strings.NewReader(text))
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		if len(f) != 2 || !strings.HasPrefix(f[1], "sha256:") {
			return nil, fmt.Errorf("function set ledger line %d: want \"<version> sha256:<hex>\", got %q", line, l)
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("function set ledger line %d: version: %w", line, err)
		}
		if want := int64(len(out) + 1); v != want {
			return nil, fmt.Errorf("function set ledger line %d: version %d, want %d (versions count up by one)", line, v, want)
		}
		out = append(out, LedgerEntry{Version: v, Checksum: f[1]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read function set ledger: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("function set ledger is empty")
	}
	return out, nil
}
