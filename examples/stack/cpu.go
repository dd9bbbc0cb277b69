package stack

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the times in /proc/<pid>/stat: the kernel reports
// them in USER_HZ clock ticks, which is 100 on every Linux architecture Go
// runs on (sysconf(_SC_CLK_TCK) would need cgo). One tick is 10 ms, so a
// figure is only meaningful over a run of seconds.
const userHZ = 100

// CPU is the CPU time (user + system) the stack's processes have used
// since they started. Take one before and one after a measured phase and
// subtract (CPU.Sub).
type CPU struct {
	// Postgres is the private cluster's whole process tree: the postmaster,
	// its live children (backends, auxiliary processes, autovacuum and
	// parallel workers) and every child that has already exited (the
	// postmaster's cumulative children times).
	Postgres time.Duration
	// Converge and Worker are the two children, all threads.
	Converge, Worker time.Duration
}

// Sub is the CPU used between the earlier sample o and c.
func (c CPU) Sub(o CPU) CPU {
	return CPU{Postgres: c.Postgres - o.Postgres, Converge: c.Converge - o.Converge, Worker: c.Worker - o.Worker}
}

// CPU samples the stack's CPU times from /proc.
func (s *Stack) CPU() (CPU, error) {
	pgPid, err := s.PostgresPid()
	if err != nil {
		return CPU{}, err
	}
	var c CPU
	var errs [3]error
	c.Postgres, errs[0] = TreeCPU(pgPid)
	c.Converge, errs[1] = TreeCPU(s.converge.Pid())
	c.Worker, errs[2] = TreeCPU(s.worker.Pid())
	return c, errors.Join(errs[:]...)
}

// PostgresPid is the private cluster's postmaster, read from the first
// line of its postmaster.pid.
func (s *Stack) PostgresPid() (int, error) {
	if s.pg == nil {
		return 0, errors.New("postgres is not running")
	}
	b, err := os.ReadFile(filepath.Join(s.pg.DataDir(), "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("read postmaster.pid: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, fmt.Errorf("parse postmaster.pid: %w", err)
	}
	return pid, nil
}

// procTimes are the CPU fields of /proc/<pid>/stat.
type procTimes struct {
	ppid                         int
	utime, stime, cutime, cstime int64 // clock ticks
}

func readProcTimes(pid int) (procTimes, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procTimes{}, err
	}
	return parseProcStat(pid, b)
}

func parseProcStat(pid int, b []byte) (procTimes, error) {
	// The command name (field 2) is parenthesised and may hold spaces or
	// parentheses: the fields that follow start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procTimes{}, fmt.Errorf("parse /proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17.
	if len(f) < 15 {
		return procTimes{}, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var t procTimes
	var errs [5]error
	t.ppid, errs[0] = strconv.Atoi(f[1])
	t.utime, errs[1] = strconv.ParseInt(f[11], 10, 64)
	t.stime, errs[2] = strconv.ParseInt(f[12], 10, 64)
	t.cutime, errs[3] = strconv.ParseInt(f[13], 10, 64)
	t.cstime, errs[4] = strconv.ParseInt(f[14], 10, 64)
	if err := errors.Join(errs[:]...); err != nil {
		return procTimes{}, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	return t, nil
}

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / userHZ }

// ProcessCPU is the user + system CPU time of one process (all its
// threads), without its children.
func ProcessCPU(pid int) (time.Duration, error) {
	t, err := readProcTimes(pid)
	if err != nil {
		return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
	}
	return ticks(t.utime + t.stime), nil
}

// BackendCPU is the on-CPU time of a single-threaded process (a Postgres
// backend) in nanoseconds' resolution, from /proc/<pid>/schedstat, which
// covers only a process's main thread: for a multi-threaded one use
// ProcessCPU.
func BackendCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("parse /proc/%d/schedstat: empty", pid)
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse /proc/%d/schedstat: %w", pid, err)
	}
	return time.Duration(ns), nil
}

// TreeCPU is the user + system CPU time of pid and of all its descendants,
// living or gone: its own times, the cumulative times of the children it
// has reaped (cutime + cstime, which include theirs), and the same,
// recursively, for every child alive now. A child that exits between the
// parent's read and its own is missed (a few ticks at most); one that is
// reaped while the tree is read cannot be counted twice, since the parent
// is read first.
func TreeCPU(pid int) (time.Duration, error) {
	t, err := readProcTimes(pid)
	if err != nil {
		return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
	}
	total := ticks(t.utime + t.stime + t.cutime + t.cstime)
	kids, err := children(pid)
	if err != nil {
		return 0, err
	}
	for _, k := range kids {
		d, err := TreeCPU(k)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // exited meanwhile
			}
			return 0, err
		}
		total += d
	}
	return total, nil
}

// children lists pid's live children: /proc/<pid>/task/<tid>/children of
// each of its threads, or a scan of /proc where the kernel lacks that file.
func children(pid int) ([]int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil // exited meanwhile
		}
		return nil, fmt.Errorf("list threads of pid %d: %w", pid, err)
	}
	var out []int
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				if _, statErr := os.Stat(fmt.Sprintf("/proc/%d/task/%s", pid, task.Name())); statErr == nil {
					return scanChildren(pid)
				}
				continue // the thread ended meanwhile
			}
			return nil, fmt.Errorf("read children of pid %d: %w", pid, err)
		}
		for _, f := range strings.Fields(string(b)) {
			if k, err := strconv.Atoi(f); err == nil {
				out = append(out, k)
			}
		}
	}
	return out, nil
}

func scanChildren(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	var out []int
	for _, e := range entries {
		k, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if t, err := readProcTimes(k); err == nil && t.ppid == pid {
			out = append(out, k)
		}
	}
	return out, nil
}
