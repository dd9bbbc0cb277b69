package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ErrBinariesNotFound is returned when the Postgres server binaries are not installed.
var ErrBinariesNotFound = errors.New("postgres server binaries (initdb, postgres) not found on PATH or under /usr/lib/postgresql/*/bin: " +
	"install the Postgres 15+ server package (Debian: apt-get install postgresql-15)")

// Binaries holds absolute paths of the server programs a cluster needs.
type Binaries struct {
	Initdb   string
	Postgres string
}

// findBinaries looks on PATH first and then under Debian's versioned
// /usr/lib/postgresql/<major>/bin, preferring the newest major version.
func findBinaries() (Binaries, error) {
	return findBinariesIn(filepath.SplitList(os.Getenv("PATH")), "/usr/lib/postgresql")
}

func findBinariesIn(path []string, debianRoot string) (Binaries, error) {
	for _, d := range path {
		if d == "" {
			continue
		}
		if b, ok := binariesIn(d); ok {
			return b, nil
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(debianRoot, "*", "bin"))
	sort.Slice(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	for _, d := range dirs {
		if b, ok := binariesIn(d); ok {
			return b, nil
		}
	}
	return Binaries{}, ErrBinariesNotFound
}

func binariesIn(dir string) (Binaries, bool) {
	look := func(name string) (string, bool) {
		p := filepath.Join(dir, name)
		st, err := os.Stat(p)
		return p, err == nil && !st.IsDir() && st.Mode()&0o111 != 0
	}
	initdb, ok1 := look("initdb")
	postgres, ok2 := look("postgres")
	if !ok1 || !ok2 {
		return Binaries{}, false
	}
	return Binaries{Initdb: initdb, Postgres: postgres}, true
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// serverMajor runs `postgres --version` and returns the major version.
func serverMajor(postgres string) (int, error) {
	out, err := exec.Command(postgres, "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("run %s --version: %w", postgres, err)
	}
	// "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
	fields := strings.Fields(string(out))
	for _, f := range fields {
		if n, err := strconv.Atoi(strings.SplitN(f, ".", 2)[0]); err == nil && n > 0 {
			return n, nil
		}
	}
	return 0, fmt.Errorf("parse postgres version from %q", strings.TrimSpace(string(out)))
}
