// Package memlimit sets the Go runtime's soft memory limit from the memory
// limit of the container the process runs in, so that the garbage collector
// works harder as the heap nears the limit instead of letting it grow to
// twice the live heap (GOGC=100) and the kernel OOM-kill the process.
//
// Invariants:
//   - An explicit GOMEMLIMIT always wins: the runtime already honours it, and
//     nothing here changes it.
//   - The limit is read once, from the cgroup v2 file memory.max or else the
//     cgroup v1 file memory/memory.limit_in_bytes under /sys/fs/cgroup; a
//     missing, unlimited or unreadable limit leaves the runtime's limit alone.
//   - Nothing here starts a goroutine.
package memlimit
