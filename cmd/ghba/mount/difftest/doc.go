// Package difftest is differential testing of a POSIX file system against
// the kernel's tmpfs: the same sequence of system calls runs in a fresh
// directory on each, and the results (errno values, bytes read, returned
// sizes and offsets, the stat fields that must match, sorted listings) and
// the final trees (names, types, modes, sizes, contents, link targets,
// owners, link counts, which names are hard links of one inode) must be
// the same. It is written for `ghba mount` (the cluster
// through FUSE) and validated tmpfs against tmpfs.
//
// # Pieces
//
//   - Op is one system call with its arguments; Op.String and ParseOp
//     (ParseSequence, FormatSequence) are its one-line text form, used by
//     the corpus (testdata/corpus/*.ops, see Corpus) and in failure reports.
//   - Generate(seed, n) makes a sequence from a seed, steered by a model of
//     the tree it builds (which names share an inode among it) so that most
//     ops hit existing names and some aim at error cases.
//   - Run executes a sequence below a root directory and returns a Result
//     per op; Compare finds the first divergence of two runs; Tree and
//     CompareTrees do the same for the final state.
//   - Differ, Check, CheckOps and Suite put these together for tests, with
//     minimisation of failing sequences; TmpfsDir gives a test a tmpfs.
//
// # Using it against a mount
//
// A test of the mount mounts the cluster on a directory, then:
//
//	cfg, err := difftest.ConfigFromEnv()
//	if err != nil {
//		t.Fatal(err)
//	}
//	difftest.Suite(t, difftest.TmpfsDir(t), mountPoint, cfg)
//
// Suite runs every corpus file as a subtest, then cfg.Seeds generated
// sequences of cfg.Ops ops. Each sequence runs in a fresh directory made
// below each of the two directories (mode 0755, owned by the test's user),
// on both at once, and the directories are removed afterwards, so the two
// roots may hold other things and may be reused. The first directory is the
// reference. Without a test of the mount, this package's own
// TestTmpfsAgainstDir points at any directory:
//
//	GHBA_DIFF_DIR=/mnt/ghba go test -tags hashicorpmetrics -count=1 -run '^TestTmpfsAgainstDir$' ./cmd/ghba/mount/difftest/
//
// The tests expect to run as root (chown, access checks, mounting a
// tmpfs); not as root, chown fails with EPERM on both sides alike and
// TmpfsDir falls back on /dev/shm. A FUSE mount must let root in
// (allow_other or allow_root) for the comparison to mean anything.
//
// # Environment
//
//	GHBA_DIFF_SEEDS     number of seeds (default 300)
//	GHBA_DIFF_OPS       ops per seed (default 200)
//	GHBA_DIFF_BASE      first seed (default 1)
//	GHBA_DIFF_SEED      run this seed only, no corpus
//	GHBA_DIFF_FILE      run this sequence file only
//	GHBA_DIFF_MINIMIZE  0: report failing sequences without minimising them
//
// # Reproducing a failure
//
// A failing sequence is reported with its seed (or corpus file), the first
// divergence (op index, op text, both results), a minimised sequence that
// still diverges (the prefix up to the divergence, then chunks of ops taken
// out while it still diverges), the path of a file holding the minimised
// sequence, and the command that reruns it, such as
//
//	GHBA_DIFF_SEED=1234 GHBA_DIFF_OPS=200 go test -tags hashicorpmetrics -count=1 -run '^TestMount$' ./cmd/ghba/mount/
//
// or, for the minimised sequence,
//
//	GHBA_DIFF_FILE=/tmp/difftest-123.ops go test ... -run '^TestMount$' ./cmd/ghba/mount/
//
// Sequences depend on the seed alone and Generate(seed, m) is a prefix of
// Generate(seed, n) for m < n. A minimised sequence worth keeping goes into
// testdata/corpus/ as NAME.ops, with "# ERRNO" (or "# ok") after each op for
// what tmpfs returns; TestCorpusExpectations checks those notes.
//
// # What is compared
//
// For every op: the errno (0 on success). Writes: bytes written. Reads:
// the bytes. lseek: the offset (not on directories, whose offsets are
// opaque cookies: tmpfs refuses SEEK_END, ext4 answers a hash offset).
// open, fstat, stat, lstat: type, permission bits (07777), size (not for
// directories), link count, uid, gid; atime and mtime only where set
// explicitly by utimens and not changed since (see Run). readlink: the
// target; the device number of character and block devices. readdir: the
// sorted names with their types, "." and ".."
// included. Never inode numbers, ctime, st_blocks, st_dev or the size of
// directories. The final trees (Tree, CompareTrees): every path's type,
// permission bits, size (not of directories), link count and owner, the
// contents of regular files and the targets of symbolic links; and, in
// place of inode numbers, which paths name one inode (hard links: the same
// st_dev and st_ino within one tree), group by group (TreeEntry.SameAs,
// Snapshot.Links).
//
// Covered calls: open (O_CREAT, O_EXCL, O_TRUNC, O_APPEND, O_DIRECTORY,
// O_NOFOLLOW), close, write, pwrite, read, pread, lseek, ftruncate, fstat,
// fsync, fchmod, fchown, truncate, mkdir, rmdir, unlink, rename and
// renameat2 (RENAME_NOREPLACE; RENAME_EXCHANGE parses but is not
// generated), link (linkat without flags: a symbolic link is linked
// itself), symlink, readlink, chmod, chown, lchown, utimensat (exact,
// UTIME_NOW, UTIME_OMIT, AT_SYMLINK_NOFOLLOW), stat, lstat, readdir,
// access, mkfifo (every open is O_NONBLOCK, so that one of a FIFO does not
// wait for its other end), mknod of character and block devices and of
// sockets (the reference tmpfs is mounted nodev, as FUSE mounts are, so an
// open of a device fails alike), and lsetxattr (XATTR_CREATE,
// XATTR_REPLACE), lgetxattr, llistxattr (the names sorted) and
// lremovexattr, with names in the user namespace and invalid ones (a mount
// must then serve extended attributes: ghba mount --xattrs).
//
// Hard links: the generator links files (FIFOs, devices and sockets among
// them) and symbolic links to new names, aims links at EEXIST (an existing
// name, the source itself, another name of its inode), EPERM (a
// directory), ENOENT (a missing source) and bad paths, and then works on
// linked inodes through two names in a few consecutive ops: write through
// one name and read through the other (open, write, close, open, read; or
// two descriptors open at once), chmod, chown, utimens or truncate through
// one and stat the other, unlink one (also with a descriptor of it open)
// and read and link the other, rename one onto the other (which succeeds
// and does nothing: both names remain; EEXIST with RENAME_NOREPLACE), set
// an extended attribute through one and get it through the other. Unlink
// and rename pick names of linked inodes more often.
//
// Paths in ops are relative, never absolute and never with "..", and so are
// symbolic link targets: nothing a sequence does reaches outside its root.
package difftest
