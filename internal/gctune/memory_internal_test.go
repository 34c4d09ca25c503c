package gctune

import (
	"math"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

const mib = 1 << 20

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

func TestMemoryBound(t *testing.T) {
	t.Parallel()
	meminfo := file("MemTotal:       24683584 kB\nMemFree:        1000 kB\n")
	for _, tc := range []struct {
		name string
		fs   fstest.MapFS
		want int64
	}{
		{"nothing known", fstest.MapFS{}, 0},
		{"the machine's memory", fstest.MapFS{"proc/meminfo": meminfo}, 24683584 << 10},
		{"a cgroup v2 limit under it", fstest.MapFS{"proc/meminfo": meminfo,
			"proc/self/cgroup": file("0::/app.slice/chat.service\n"),
			"sys/fs/cgroup/app.slice/chat.service/memory.max": file("536870912\n")}, 512 * mib},
		{"cgroup v2 without a limit", fstest.MapFS{"proc/meminfo": meminfo,
			"proc/self/cgroup":                   file("0::/app.slice\n"),
			"sys/fs/cgroup/app.slice/memory.max": file("max\n")}, 24683584 << 10},
		{"a container's root cgroup v2", fstest.MapFS{"proc/meminfo": meminfo,
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("268435456")}, 256 * mib},
		{"a cgroup v1 limit", fstest.MapFS{"proc/meminfo": meminfo,
			"proc/self/cgroup": file("4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n"),
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": file("1073741824\n")}, 1024 * mib},
		{"cgroup v1 without a limit", fstest.MapFS{"proc/meminfo": meminfo,
			"proc/self/cgroup": file("4:memory:/x\n"),
			"sys/fs/cgroup/memory/x/memory.limit_in_bytes": file("9223372036854771712\n")}, 24683584 << 10},
		{"a limit over the machine's memory", fstest.MapFS{"proc/meminfo": file("MemTotal: 1048576 kB\n"),
			"sys/fs/cgroup/memory.max": file("4294967296")}, 1024 * mib},
		{"unreadable files", fstest.MapFS{"proc/meminfo": file("MemTotal: lots\n"),
			"sys/fs/cgroup/memory.max": file("-1")}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, memoryBound(tc.fs))
		})
	}
}

func TestBoundedFloor(t *testing.T) {
	t.Parallel()
	small := fstest.MapFS{"sys/fs/cgroup/memory.max": file("536870912")} // 512 MiB
	require.Equal(t, int64(256*mib), boundedFloor(256*mib, fstest.MapFS{}, math.MaxInt64), "nothing known")
	require.Equal(t, int64(128*mib), boundedFloor(256*mib, small, math.MaxInt64), "a quarter of the cgroup's limit")
	require.Equal(t, int64(64*mib), boundedFloor(256*mib, small, 128*mib), "half of GOMEMLIMIT")
	require.Equal(t, int64(100*mib), boundedFloor(100*mib, small, 1<<40), "a floor that fits stays")
}
