package data

import (
	"bufio"
	"math"
	"os"
	"strconv"
	"strings"
)

// PhysicalMemory is the machine's memory in bytes (Linux's MemTotal), the
// loader's bound when data.memory_limit is 0; MaxInt64 where it cannot
// be read.
func PhysicalMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return math.MaxInt64
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				break
			}
			return kb << 10
		}
	}
	return math.MaxInt64
}
