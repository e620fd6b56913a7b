//go:build !linux

package node

// machineMemory returns 0: the machine's memory is not read on this
// system, and DefaultFilterMemoryMB takes its fallback.
func machineMemory() uint64 { return 0 }
