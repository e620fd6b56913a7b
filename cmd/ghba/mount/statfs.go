package mount

import (
	"context"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// statfsBlockSize is the unit of statfs's block counts.
const statfsBlockSize = 4096

// statfsBlocks is the size statfs reports: object stores do not tell
// theirs, so the mount reports a large one (1 PiB), all of it free, as
// other object-store file systems do.
const statfsBlocks = 1 << 50 / statfsBlockSize

// statfsFiles is the number of inodes statfs reports in all.
const statfsFiles = 1 << 40

// statfs fills out with the cluster's inode count (its shards' file
// counts) and the nominal size of the data store.
func (f *FS) statfs(ctx context.Context, out *fuse.StatfsOut) {
	var used uint64
	if sh, err := f.c.Shards(ctx); err == nil {
		for _, s := range sh.Shards {
			used += uint64(max(s.Files, 0))
		}
	} else {
		f.log.Warn("statfs: counting the cluster's files", "err", err)
	}
	out.Bsize = statfsBlockSize
	out.Frsize = statfsBlockSize
	out.Blocks = statfsBlocks
	out.Bfree = statfsBlocks
	out.Bavail = statfsBlocks
	out.Files = statfsFiles
	out.Ffree = statfsFiles - min(used, statfsFiles)
	out.NameLen = maxNameLen
}
