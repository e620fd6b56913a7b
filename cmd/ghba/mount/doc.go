// Package mount serves a ghba cluster as a POSIX file system through FUSE
// (hanwen/go-fuse v2): `ghba mount`. Metadata lives in the cluster and is
// reached through the Go client (rpc/client); file contents live in the
// object store the cluster names (`ghba data-store`) as blocks keyed by
// inode id (node/contents). docs/design.md, "Mount", is the design; this
// comment is the map of the package.
//
//   - mount.go: Options, Mount (checks, the FUSE server, the cluster's data
//     store) and the mounted file system's shared state (FS).
//   - node.go: the inode operations: lookup, getattr, setattr, mkdir,
//     create, unlink, rmdir, rename, symlink, readlink, readdir, statfs.
//   - file.go: open files (one contents.File per inode while any handle is
//     open), reads, writes, flush, fsync, release, and the commit of a
//     file's new size and layout (close-to-open consistency).
//   - notify.go: the client cache's lease revocations turned into kernel
//     cache invalidations.
//   - errno.go: ghba errors as the errno values the kernel's own file
//     systems return.
//
// Inode numbers are the cluster's inode ids (stable: a rename keeps them),
// the root's is 1. Paths are derived from go-fuse's tree of known inodes,
// which it keeps current across this mount's renames.
package mount
