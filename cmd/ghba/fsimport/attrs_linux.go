package fsimport

import (
	"io/fs"
	"syscall"
)

// sysAttrs fills the owner and access time from the system's stat data.
func sysAttrs(info fs.FileInfo, a *attrs) {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		a.uid, a.gid = st.Uid, st.Gid
		a.atime = st.Atim.Nano()
	}
}
