package memlimit

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

// mountinfo lines for the layouts below (fields as the kernel prints them).
const (
	v1Memory   = "31 24 0:27 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,memory\n"
	v1CPU      = "30 24 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:12 - cgroup cgroup rw,cpu,cpuacct\n"
	v2Root     = "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
	v2Unified  = "25 24 0:22 / /sys/fs/cgroup/unified rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
	rootfsLine = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
)

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

func TestCgroupLimit_ReadsEachLayout(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		fs    fstest.MapFS
		limit int64
		file  string
	}{{
		name: "v1, the process's own cgroup (this kind of host)",
		fs: fstest.MapFS{
			"proc/self/cgroup":    file("5:cpu,cpuacct:/\n4:memory:/process_api/0820\n0::/\n"),
			"proc/self/mountinfo": file(rootfsLine + v1CPU + v1Memory + v2Unified),
			"sys/fs/cgroup/memory/process_api/0820/memory.limit_in_bytes": file("536870912\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                  file("9223372036854771712\n"),
		},
		limit: 512 << 20, file: "/sys/fs/cgroup/memory/process_api/0820/memory.limit_in_bytes",
	}, {
		name: "v1 unset: the page counter's maximum is no limit",
		fs: fstest.MapFS{
			"proc/self/cgroup":    file("4:memory:/process_api/0820\n"),
			"proc/self/mountinfo": file(v1Memory),
			"sys/fs/cgroup/memory/process_api/0820/memory.limit_in_bytes": file("9223372036854771712\n"),
		},
	}, {
		name: "v1 in a container without a cgroup namespace: the mount's root is the container's cgroup",
		fs: fstest.MapFS{
			"proc/self/cgroup":                           file("4:memory:/docker/abc\n"),
			"proc/self/mountinfo":                        file("31 24 0:27 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("268435456"),
		},
		limit: 256 << 20, file: "/sys/fs/cgroup/memory/memory.limit_in_bytes",
	}, {
		name: "v2 in a Kubernetes container (cgroup namespace)",
		fs: fstest.MapFS{
			"proc/self/cgroup":                 file("0::/\n"),
			"proc/self/mountinfo":              file(rootfsLine + v2Root),
			"sys/fs/cgroup/memory.max":         file("536870912\n"),
			"sys/fs/cgroup/memory.high":        file("max\n"),
			"sys/fs/cgroup/cgroup.controllers": file("cpu memory pids\n"),
		},
		limit: 512 << 20, file: "/sys/fs/cgroup/memory.max",
	}, {
		name: "v2 unlimited service under a limited slice: the slice's limit",
		fs: fstest.MapFS{
			"proc/self/cgroup":    file("0::/converge.slice/converge.service\n"),
			"proc/self/mountinfo": file(v2Root),
			"sys/fs/cgroup/converge.slice/converge.service/memory.max": file("max\n"),
			"sys/fs/cgroup/converge.slice/memory.max":                  file("1073741824\n"),
		},
		limit: 1 << 30, file: "/sys/fs/cgroup/converge.slice/memory.max",
	}, {
		name: "v2: the tightest limit on the path wins",
		fs: fstest.MapFS{
			"proc/self/cgroup":             file("0::/a/b\n"),
			"proc/self/mountinfo":          file(v2Root),
			"sys/fs/cgroup/a/b/memory.max": file("2147483648\n"),
			"sys/fs/cgroup/a/memory.max":   file("1073741824\n"),
		},
		limit: 1 << 30, file: "/sys/fs/cgroup/a/memory.max",
	}, {
		name: "hybrid host: the v1 memory controller, not the unified mount",
		fs: fstest.MapFS{
			"proc/self/cgroup":                               file("4:memory:/svc\n0::/svc\n"),
			"proc/self/mountinfo":                            file(v2Unified + v1Memory),
			"sys/fs/cgroup/memory/svc/memory.limit_in_bytes": file("134217728\n"),
		},
		limit: 128 << 20, file: "/sys/fs/cgroup/memory/svc/memory.limit_in_bytes",
	}, {
		name: "an escaped space in the mount point",
		fs: fstest.MapFS{
			"proc/self/cgroup":       file("0::/\n"),
			"proc/self/mountinfo":    file("35 24 0:30 / /mnt/cg\\040root rw - cgroup2 cgroup2 rw\n"),
			"mnt/cg root/memory.max": file("104857600\n"),
		},
		limit: 100 << 20, file: "/mnt/cg root/memory.max",
	}, {
		name: "no /proc: no cgroup to read",
		fs:   fstest.MapFS{},
	}, {
		name: "no memory hierarchy mounted",
		fs: fstest.MapFS{
			"proc/self/cgroup":    file("4:memory:/svc\n"),
			"proc/self/mountinfo": file(rootfsLine + v1CPU),
		},
	}}
	for _, tc := range cases {
		limit, f, err := cgroupLimit(tc.fs)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.limit, limit, tc.name)
		require.Equal(t, tc.file, f, tc.name)
	}
}

func TestCgroupLimit_RefusesAValueThatIsNotAByteCount(t *testing.T) {
	t.Parallel()
	_, _, err := cgroupLimit(fstest.MapFS{
		"proc/self/cgroup":         file("0::/\n"),
		"proc/self/mountinfo":      file(v2Root),
		"sys/fs/cgroup/memory.max": file("512M\n"),
	})
	require.EqualError(t, err, `memlimit: /sys/fs/cgroup/memory.max: "512M" is not a byte count`)
}

func TestApply_SetsTheRatioOfTheLimitUnlessGOMEMLIMITIsSet(t *testing.T) {
	t.Parallel()
	limited := fstest.MapFS{
		"proc/self/cgroup":         file("0::/\n"),
		"proc/self/mountinfo":      file(v2Root),
		"sys/fs/cgroup/memory.max": file("1000000000\n"),
	}
	noEnv := func(string) (string, bool) { return "", false }
	var set []int64
	record := func(n int64) int64 { set = append(set, n); return 0 }

	res, err := apply(limited, DefaultRatio, noEnv, record)
	require.NoError(t, err)
	require.Equal(t, Result{CgroupLimit: 1_000_000_000, File: "/sys/fs/cgroup/memory.max", Soft: 900_000_000}, res)
	require.Equal(t, []int64{900_000_000}, set)

	set = nil
	res, err = apply(limited, DefaultRatio, func(k string) (string, bool) { return "off", k == "GOMEMLIMIT" }, record)
	require.NoError(t, err)
	require.Equal(t, Result{FromEnv: true}, res, "GOMEMLIMIT=off is the operator's choice too")
	require.Empty(t, set)

	res, err = apply(fstest.MapFS{}, DefaultRatio, noEnv, record)
	require.NoError(t, err)
	require.Equal(t, Result{}, res, "no cgroup limit: nothing set")
	require.Empty(t, set)

	for _, r := range []float64{0, -0.5, 1.5} {
		_, err = apply(limited, r, noEnv, record)
		require.ErrorContains(t, err, "outside (0, 1]")
	}
	require.Empty(t, set)
}

// An empty GOMEMLIMIT (a manifest's env entry with no value) is unset to
// the Go runtime, which then has no limit at all: Apply sets the cgroup's
// ratio as for no GOMEMLIMIT. Before, it left the runtime alone and logged
// the limit as left to GOMEMLIMIT.
func TestApply_AnEmptyGOMEMLIMITIsUnset(t *testing.T) {
	t.Parallel()
	limited := fstest.MapFS{
		"proc/self/cgroup":         file("0::/\n"),
		"proc/self/mountinfo":      file(v2Root),
		"sys/fs/cgroup/memory.max": file("1000000000\n"),
	}
	var set []int64
	res, err := apply(limited, DefaultRatio, func(k string) (string, bool) { return "", k == "GOMEMLIMIT" },
		func(n int64) int64 { set = append(set, n); return 0 })
	require.NoError(t, err)
	require.Equal(t, Result{CgroupLimit: 1_000_000_000, File: "/sys/fs/cgroup/memory.max", Soft: 900_000_000}, res)
	require.Equal(t, []int64{900_000_000}, set)
}
