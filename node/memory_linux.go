package node

import "syscall"

// machineMemory returns the machine's physical memory in bytes (0 when it
// cannot be read).
func machineMemory() uint64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}
