// Package memlimit gives the Go runtime a soft memory limit below the hard
// one of the process's cgroup, so a container's heap is collected harder as
// it nears its limit instead of being killed at it.
//
// Go sizes its heap from GOGC alone: the collector lets the heap grow to
// twice what was live at its last cycle, whatever the container allows. A
// transient peak (many large compositions or rollups in flight at once) can
// then take a process past a Kubernetes memory limit that its live heap is
// far below. With a soft limit the collector runs early near it (at most
// half the CPU, by the runtime's own cap) and hands memory back to the
// kernel. Set GOMEMLIMIT to choose the limit yourself (GOMEMLIMIT=off: none);
// Apply then leaves the runtime alone.
package memlimit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
)

// DefaultRatio is the share of the cgroup's limit the Go runtime may use: the
// rest is for what the runtime does not count (the binary's mapped pages,
// cgo, the kernel's per-process accounting).
const DefaultRatio = 0.9

// unlimited is the smallest value read as "no limit": cgroup v1 reports an
// unset limit as the page counter's maximum (9223372036854771712 on 4 KiB
// pages), and no real limit comes near 2^62 bytes.
const unlimited = 1 << 62

// Result is what Apply found and did, for the caller to log.
type Result struct {
	// FromEnv: GOMEMLIMIT is set (not empty), and the runtime keeps what it
	// made of it.
	FromEnv bool
	// CgroupLimit is the cgroup's memory limit in bytes (0: none found), and
	// File the file it was read from.
	CgroupLimit int64
	File        string
	// Soft is the soft limit set, in bytes (0: none set).
	Soft int64
}

// Apply sets the runtime's soft memory limit to ratio × the memory limit of
// the process's cgroup (v1 or v2; the tightest limit on the path from the
// process's cgroup to the hierarchy's root), unless GOMEMLIMIT is set (and
// not empty) or no limit is found. An unreadable cgroup is reported as an error, with no limit
// set: the process runs as it would have without it.
func Apply(ratio float64) (Result, error) {
	return apply(os.DirFS("/"), ratio, os.LookupEnv, debug.SetMemoryLimit)
}

// apply is Apply over a root file system, an environment and the runtime's
// setter.
func apply(fsys fs.FS, ratio float64, lookupEnv func(string) (string, bool), set func(int64) int64) (Result, error) {
	if ratio <= 0 || ratio > 1 {
		return Result{}, fmt.Errorf("memlimit: ratio %v is outside (0, 1]", ratio)
	}
	// An empty GOMEMLIMIT is unset to the runtime (no limit): ours to set.
	if v, ok := lookupEnv("GOMEMLIMIT"); ok && v != "" {
		return Result{FromEnv: true}, nil
	}
	limit, file, err := cgroupLimit(fsys)
	if err != nil || limit == 0 {
		return Result{}, err
	}
	soft := int64(float64(limit) * ratio)
	set(soft)
	return Result{CgroupLimit: limit, File: file, Soft: soft}, nil
}

// cgroupLimit finds the memory limit of this process's cgroup in fsys (the
// root file system): 0 when there is none. It reads /proc/self/cgroup for
// the process's cgroup paths and /proc/self/mountinfo for where the
// hierarchies are mounted, then walks from the process's cgroup up to the
// mount's root, keeping the smallest limit: a container's own cgroup, or a
// slice above it, may carry it. The v1 memory controller and the v2
// hierarchy are both tried (a hybrid host mounts both, and only one carries
// memory limits).
func cgroupLimit(fsys fs.FS) (int64, string, error) {
	cgroups, err := fs.ReadFile(fsys, "proc/self/cgroup")
	if errors.Is(err, fs.ErrNotExist) {
		return 0, "", nil // not Linux, or no /proc: no cgroup to read
	}
	if err != nil {
		return 0, "", fmt.Errorf("memlimit: %w", err)
	}
	mounts, err := fs.ReadFile(fsys, "proc/self/mountinfo")
	if err != nil {
		return 0, "", fmt.Errorf("memlimit: %w", err)
	}
	v1, v2 := cgroupPaths(string(cgroups))
	for _, h := range []struct {
		path, file string
		match      func(fstype, options string) bool
	}{
		{v1, "memory.limit_in_bytes", func(t, o string) bool { return t == "cgroup" && hasOption(o, "memory") }},
		{v2, "memory.max", func(t, _ string) bool { return t == "cgroup2" }},
	} {
		if h.path == "" {
			continue
		}
		root, point, ok := mountOf(string(mounts), h.match)
		if !ok {
			continue
		}
		limit, file, found, err := walkUp(fsys, root, point, h.path, h.file)
		if err != nil || found {
			return limit, file, err
		}
	}
	return 0, "", nil
}

// cgroupPaths returns the process's memory cgroup path (v1) and its unified
// cgroup path (v2) from /proc/self/cgroup ("" where there is none).
func cgroupPaths(s string) (v1, v2 string) {
	for line := range strings.Lines(s) {
		id, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		controllers, p, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		switch {
		case id == "0" && controllers == "":
			v2 = p
		case hasOption(controllers, "memory"):
			v1 = p
		}
	}
	return v1, v2
}

// mountOf finds the first mount in /proc/self/mountinfo that match accepts:
// the cgroup path mounted (its root) and where (its mount point).
func mountOf(s string, match func(fstype, options string) bool) (root, point string, ok bool) {
	for line := range strings.Lines(s) {
		// id parent major:minor root point options [optional…] - fstype source super-options
		pre, post, found := strings.Cut(strings.TrimSuffix(line, "\n"), " - ")
		if !found {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		if match(g[0], g[2]) {
			return unescape(f[3]), unescape(f[4]), true
		}
	}
	return "", "", false
}

// walkUp reads name in the process's cgroup directory and each parent up to
// the mount's root, and returns the smallest limit set among them.
func walkUp(fsys fs.FS, root, point, cgroup, name string) (limit int64, file string, found bool, err error) {
	rel := cgroup
	if root != "/" {
		if rel != root && !strings.HasPrefix(rel, root+"/") {
			// The process's cgroup is outside this mount's view (a cgroup
			// namespace shows it as "/"): read the mount point itself.
			rel = root
		}
		rel = strings.TrimPrefix(rel, root)
	}
	dir := path.Clean("/" + rel)
	for {
		p := strings.TrimPrefix(path.Join(point, dir, name), "/")
		b, rerr := fs.ReadFile(fsys, p)
		switch {
		case errors.Is(rerr, fs.ErrNotExist):
		case rerr != nil:
			return 0, "", false, fmt.Errorf("memlimit: %w", rerr)
		default:
			v := strings.TrimSpace(string(b))
			if v != "max" {
				n, perr := strconv.ParseInt(v, 10, 64)
				if perr != nil {
					return 0, "", false, fmt.Errorf("memlimit: /%s: %q is not a byte count", p, v)
				}
				if n > 0 && n < unlimited && (!found || n < limit) {
					limit, file, found = n, "/"+p, true
				}
			}
		}
		if dir == "/" {
			return limit, file, found, nil
		}
		dir = path.Dir(dir)
	}
}

// hasOption reports whether the comma-separated list holds opt.
func hasOption(list, opt string) bool {
	for o := range strings.SplitSeq(list, ",") {
		if o == opt {
			return true
		}
	}
	return false
}

// unescape undoes mountinfo's octal escapes (\040 for a space, …).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ApplyAndLog is Apply at DefaultRatio with its outcome logged once, for a
// process's main: what was set and from which file, that GOMEMLIMIT rules,
// or why the cgroup could not be read (the process then runs without a soft
// limit, as it would have before).
func ApplyAndLog(log zerolog.Logger) {
	res, err := Apply(DefaultRatio)
	switch {
	case err != nil:
		log.Warn().Err(err).Msg("no soft memory limit: the cgroup's memory limit could not be read")
	case res.FromEnv:
		log.Info().Str("GOMEMLIMIT", os.Getenv("GOMEMLIMIT")).Msg("soft memory limit left to GOMEMLIMIT")
	case res.Soft > 0:
		log.Info().Int64("cgroup_limit_bytes", res.CgroupLimit).Int64("soft_limit_bytes", res.Soft).Str("file", res.File).
			Msg("soft memory limit set below the cgroup's")
	}
}
