package gctune

import (
	"bufio"
	"bytes"
	"io/fs"
	"math"
	"slices"
	"strconv"
	"strings"
)

// A heap floor is a heap the process lets grow before it collects, so it
// must fit in the memory the process may use: Apply lowers a Policy's
// Floor to a quarter of the least of its cgroup's memory limit (a
// container's) and the machine's memory, and to half of GOMEMLIMIT when
// one is set. Without these a floor sized for a server could take a
// small container past its limit, which the Go runtime does not read.

// boundedFloor is floor lowered to what the memory the process may use
// allows: a quarter of memoryBound(fsys), half of memLimit (GOMEMLIMIT;
// math.MaxInt64 when unset).
func boundedFloor(floor int64, fsys fs.FS, memLimit int64) int64 {
	if b := memoryBound(fsys); b > 0 {
		floor = min(floor, b/4)
	}
	if memLimit > 0 && memLimit < math.MaxInt64 {
		floor = min(floor, memLimit/2)
	}
	return floor
}

// memoryBound is the least of the process's cgroup memory limit (v2 or
// v1) and the machine's memory (/proc/meminfo), read from fsys (the root
// file system); 0 when neither is known.
func memoryBound(fsys fs.FS) int64 {
	bound := int64(0)
	lower := func(n int64) {
		if n > 0 && (bound == 0 || n < bound) {
			bound = n
		}
	}
	if n, ok := memTotal(fsys); ok {
		lower(n)
	}
	for _, p := range cgroupLimitFiles(fsys) {
		if n, ok := readLimit(fsys, p); ok {
			lower(n)
			break
		}
	}
	return bound
}

// cgroupLimitFiles are the files that may hold the process's cgroup
// memory limit, the most specific first: its own cgroup's, by
// /proc/self/cgroup, then the mount's root (what a container sees).
func cgroupLimitFiles(fsys fs.FS) []string {
	var files []string
	if b, err := fs.ReadFile(fsys, "proc/self/cgroup"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			// hierarchy-id:controllers:path
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			path := strings.Trim(parts[2], "/")
			switch {
			case parts[0] == "0" && parts[1] == "" && path != "":
				files = append(files, "sys/fs/cgroup/"+path+"/memory.max")
			case slices.Contains(strings.Split(parts[1], ","), "memory") && path != "":
				files = append(files, "sys/fs/cgroup/memory/"+path+"/memory.limit_in_bytes")
			}
		}
	}
	return append(files, "sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes")
}

// unlimited is where a cgroup v1 limit means none (the kernel writes its
// largest page-aligned value).
const unlimited = 1 << 60

// readLimit reads a cgroup memory limit file: a number of bytes, or
// "max" (v2) or a huge number (v1) for none, which reports false.
func readLimit(fsys fs.FS, name string) (int64, bool) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || n <= 0 || n >= unlimited {
		return 0, false
	}
	return n, true
}

// memTotal reads the machine's memory from /proc/meminfo.
func memTotal(fsys fs.FS) (int64, bool) {
	f, err := fsys.Open("proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, false
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || kb <= 0 {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}
