package fsimport

import (
	"io/fs"
	"syscall"

	"github.com/ghba/ghba/rpc"
)

// sysAttrs fills the owner, the access time and a device's number from
// the system's stat data.
func sysAttrs(info fs.FileInfo, a *attrs) {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		a.uid, a.gid = st.Uid, st.Gid
		a.atime = st.Atim.Nano()
		if a.typ == rpc.TypeCharDev || a.typ == rpc.TypeBlockDev {
			a.rdev = st.Rdev
		}
	}
}
