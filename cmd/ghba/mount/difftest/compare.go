package difftest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// FinalState is the Divergence.Index of a difference found in the final
// trees rather than in an op's result.
const FinalState = -1

// Divergence is the first difference between two runs of the same sequence.
type Divergence struct {
	Index  int    // the op's index, or FinalState
	Op     Op     // the op (zero for FinalState)
	A, B   string // the two results (or tree entries), summarised
	Detail string // what differs
}

// Error describes the divergence on a few lines.
func (d *Divergence) Error() string {
	if d.Index == FinalState {
		return fmt.Sprintf("final trees differ: %s\n  A: %s\n  B: %s", d.Detail, d.A, d.B)
	}
	return fmt.Sprintf("op %d: %s\n  %s\n  A: %s\n  B: %s", d.Index, d.Op, d.Detail, d.A, d.B)
}

// Compare returns a *Divergence for the first op whose results differ in a
// and b (which come from Run of the same ops), or nil.
func Compare(a, b []Result) error {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i].Op != b[i].Op {
			return &Divergence{Index: i, Op: a[i].Op, A: a[i].Op.String(), B: b[i].Op.String(), Detail: "different ops"}
		}
		if d := diffResult(a[i], b[i]); d != "" {
			return &Divergence{Index: i, Op: a[i].Op, A: a[i].String(), B: b[i].String(), Detail: d}
		}
	}
	if len(a) != len(b) {
		n := min(len(a), len(b))
		return &Divergence{Index: n, A: strconv.Itoa(len(a)) + " results", B: strconv.Itoa(len(b)) + " results", Detail: "different numbers of results"}
	}
	return nil
}

// diffResult says how two results differ, or "" when they agree.
func diffResult(a, b Result) string {
	if a.Errno != b.Errno {
		return fmt.Sprintf("errno %s vs %s", ErrnoString(a.Errno), ErrnoString(b.Errno))
	}
	if a.N != b.N {
		return fmt.Sprintf("returned %d vs %d", a.N, b.N)
	}
	if !bytes.Equal(a.Data, b.Data) {
		i := 0
		for i < len(a.Data) && i < len(b.Data) && a.Data[i] == b.Data[i] {
			i++
		}
		return fmt.Sprintf("data differs from byte %d (lengths %d and %d)", i, len(a.Data), len(b.Data))
	}
	if (a.Stat == nil) != (b.Stat == nil) {
		return "stat present on one side only"
	}
	if a.Stat != nil && *a.Stat != *b.Stat {
		return "stat " + diffStat(*a.Stat, *b.Stat)
	}
	if !slices.Equal(a.Names, b.Names) {
		return fmt.Sprintf("names %q vs %q", a.Names, b.Names)
	}
	if a.Target != b.Target {
		return "link target differs"
	}
	if d := diffEntries(a.Entries, b.Entries); d != "" {
		return d
	}
	return ""
}

func diffStat(a, b Stat) string {
	var parts []string
	if a.Type != b.Type {
		parts = append(parts, fmt.Sprintf("type %s vs %s", a.Type, b.Type))
	}
	if a.Perm != b.Perm {
		parts = append(parts, fmt.Sprintf("mode %04o vs %04o", a.Perm, b.Perm))
	}
	if a.Size != b.Size {
		parts = append(parts, fmt.Sprintf("size %d vs %d", a.Size, b.Size))
	}
	if a.Nlink != b.Nlink {
		parts = append(parts, fmt.Sprintf("nlink %d vs %d", a.Nlink, b.Nlink))
	}
	if a.UID != b.UID || a.GID != b.GID {
		parts = append(parts, fmt.Sprintf("owner %d:%d vs %d:%d", a.UID, a.GID, b.UID, b.GID))
	}
	if a.Atime != b.Atime {
		parts = append(parts, fmt.Sprintf("atime %s vs %s", a.Atime, b.Atime))
	}
	if a.Mtime != b.Mtime {
		parts = append(parts, fmt.Sprintf("mtime %s vs %s", a.Mtime, b.Mtime))
	}
	return strings.Join(parts, ", ")
}

func diffEntries(a, b []Entry) string {
	am := map[string]FileType{}
	for _, e := range a {
		am[e.Name] = e.Type
	}
	bm := map[string]FileType{}
	for _, e := range b {
		bm[e.Name] = e.Type
	}
	var parts []string
	for _, e := range a {
		t, ok := bm[e.Name]
		switch {
		case !ok:
			parts = append(parts, "only in A: "+strconv.Quote(e.Name))
		case t != e.Type:
			parts = append(parts, fmt.Sprintf("%q: %s vs %s", e.Name, e.Type, t))
		}
	}
	for _, e := range b {
		if _, ok := am[e.Name]; !ok {
			parts = append(parts, "only in B: "+strconv.Quote(e.Name))
		}
	}
	if len(parts) == 0 && len(a) != len(b) {
		parts = append(parts, fmt.Sprintf("%d vs %d entries (duplicates)", len(a), len(b)))
	}
	if len(parts) == 0 {
		return ""
	}
	return "entries: " + strings.Join(parts, "; ")
}

// TreeEntry is one file of a Snapshot.
type TreeEntry struct {
	Path   string // relative to the root; "." for the root itself
	Type   FileType
	Perm   uint32
	Size   int64 // 0 for directories
	Nlink  uint64
	UID    uint32
	GID    uint32
	Target string     // symbolic links
	Hash   string     // regular files: hex SHA-256 of the contents
	Err    unix.Errno // reading the contents or listing the directory failed
	// SameAs is the first path of the snapshot (in its order) that names
	// the same inode (the same st_dev and st_ino) as this one: another
	// hard link. It is "" for the first name of an inode and for an
	// inode with one name. Inode numbers themselves are never kept: they
	// differ between file systems; which paths share one does not.
	SameAs string
}

// String summarises the entry on one line.
func (e TreeEntry) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %04o uid=%d gid=%d nlink=%d", strconv.Quote(e.Path), e.Type, e.Perm, e.UID, e.GID, e.Nlink)
	if e.Type != TypeDir {
		fmt.Fprintf(&b, " size=%d", e.Size)
	}
	if e.Type == TypeSymlink {
		fmt.Fprintf(&b, " target=%s", strconv.Quote(e.Target))
	}
	if e.Hash != "" {
		fmt.Fprintf(&b, " sha256:%s", e.Hash[:12])
	}
	if e.Err != 0 {
		fmt.Fprintf(&b, " err=%s", ErrnoString(e.Err))
	}
	if e.SameAs != "" {
		fmt.Fprintf(&b, " same-inode-as=%s", strconv.Quote(e.SameAs))
	}
	return b.String()
}

// Snapshot is the state of a tree: every file, depth first with the names of
// a directory sorted, the root first.
type Snapshot struct {
	Entries []TreeEntry
}

// Links returns the paths that name one inode, for every inode of the
// snapshot with more than one name (hard links): each group in snapshot
// order, the groups ordered by their first path's position.
func (s Snapshot) Links() [][]string {
	others := map[string][]string{} // a group's first path: the others
	for _, e := range s.Entries {
		if e.SameAs != "" {
			others[e.SameAs] = append(others[e.SameAs], e.Path)
		}
	}
	var groups [][]string
	for _, e := range s.Entries {
		if o, ok := others[e.Path]; ok {
			groups = append(groups, append([]string{e.Path}, o...))
		}
	}
	return groups
}

// String lists the entries, one per line.
func (s Snapshot) String() string {
	var b strings.Builder
	for _, e := range s.Entries {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Tree snapshots the tree under root: names, types, permission bits, sizes,
// link counts, owners, symlink targets, full contents (as hashes) and which
// paths name the same inode (TreeEntry.SameAs). It walks with
// directory descriptors, so paths longer than PATH_MAX are fine. Listing a
// directory or reading a file that fails (say, mode 0000 when not root) is
// recorded in the entry's Err rather than failing the snapshot.
func Tree(root string) (Snapshot, error) {
	var s Snapshot
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return s, fmt.Errorf("snapshot %s: %w", root, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return s, fmt.Errorf("snapshot %s: %w", root, err)
	}
	w := &walker{buf: make([]byte, 64*1024), first: map[inodeKey]string{}}
	s.Entries = append(s.Entries, w.entryOf(".", &st))
	if err := w.walk(fd, "", &s); err != nil {
		return s, fmt.Errorf("snapshot %s: %w", root, err)
	}
	return s, nil
}

// inodeKey identifies an inode within one snapshot.
type inodeKey struct{ dev, ino uint64 }

type walker struct {
	buf   []byte
	first map[inodeKey]string // the first path met of each inode
}

// entryOf makes the entry of path from its lstat, noting the first path
// met of the same inode in SameAs.
func (w *walker) entryOf(path string, st *unix.Stat_t) TreeEntry {
	e := entryOf(path, st)
	k := inodeKey{uint64(st.Dev), st.Ino}
	if p, ok := w.first[k]; ok {
		e.SameAs = p
	} else {
		w.first[k] = path
	}
	return e
}

func entryOf(path string, st *unix.Stat_t) TreeEntry {
	e := TreeEntry{Path: path, Type: typeOfMode(st.Mode), Perm: st.Mode & 07777, UID: st.Uid, GID: st.Gid, Nlink: uint64(st.Nlink)}
	if e.Type != TypeDir {
		e.Size = st.Size
	}
	return e
}

func (w *walker) walk(dfd int, prefix string, s *Snapshot) error {
	entries, err := listDir(dfd, w.buf, false)
	if err != nil {
		s.Entries[len(s.Entries)-1].Err = errnoOf(err)
		return nil
	}
	for _, de := range entries {
		p := de.Name
		if prefix != "" {
			p = prefix + "/" + de.Name
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, de.Name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("lstat %q: %w", p, err)
		}
		e := w.entryOf(p, &st)
		switch e.Type {
		case TypeSymlink:
			n, err := unix.Readlinkat(dfd, de.Name, w.buf)
			if err != nil {
				e.Err = errnoOf(err)
			} else {
				e.Target = string(w.buf[:n])
			}
			s.Entries = append(s.Entries, e)
		case TypeFile:
			e.Hash, e.Err = hashFile(dfd, de.Name)
			s.Entries = append(s.Entries, e)
		case TypeDir:
			s.Entries = append(s.Entries, e)
			sub, err := unix.Openat(dfd, de.Name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				s.Entries[len(s.Entries)-1].Err = errnoOf(err)
				continue
			}
			err = w.walk(sub, p, s)
			unix.Close(sub)
			if err != nil {
				return err
			}
		default:
			s.Entries = append(s.Entries, e)
		}
	}
	return nil
}

func hashFile(dfd int, name string) (string, unix.Errno) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", errnoOf(err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", errnoOf(err)
	}
	return hex.EncodeToString(h.Sum(nil)), 0
}

// CompareTrees returns a *Divergence (Index FinalState) for the first entry
// that differs between a and b, or is in one only, or else for the first
// path whose inode has other names in one tree than in the other (hard
// links: the groups of paths that share an inode must be the same; the
// inode numbers are not compared), or nil.
func CompareTrees(a, b Snapshot) error {
	bm := make(map[string]TreeEntry, len(b.Entries))
	for _, e := range b.Entries {
		bm[e.Path] = e
	}
	am := make(map[string]bool, len(a.Entries))
	for _, ea := range a.Entries {
		am[ea.Path] = true
		eb, ok := bm[ea.Path]
		if !ok {
			return &Divergence{Index: FinalState, Detail: "only in A: " + strconv.Quote(ea.Path), A: ea.String(), B: "(missing)"}
		}
		ca, cb := ea, eb
		ca.SameAs, cb.SameAs = "", "" // compared below, as groups
		if ca != cb {
			return &Divergence{Index: FinalState, Detail: "entry " + strconv.Quote(ea.Path) + " differs", A: ea.String(), B: eb.String()}
		}
	}
	for _, eb := range b.Entries {
		if !am[eb.Path] {
			return &Divergence{Index: FinalState, Detail: "only in B: " + strconv.Quote(eb.Path), A: "(missing)", B: eb.String()}
		}
	}
	// Both trees have the same paths: the same groups of names per inode.
	ga, gb := namesOfInodes(a), namesOfInodes(b)
	for _, e := range a.Entries {
		na, nb := ga[e.Path], gb[e.Path]
		if !slices.Equal(na, nb) {
			return &Divergence{Index: FinalState, Detail: "the names of the inode at " + strconv.Quote(e.Path) + " differ (hard links)",
				A: quoteAll(na), B: quoteAll(nb)}
		}
	}
	return nil
}

// namesOfInodes maps every path of s to all the paths of its inode, in
// snapshot order (the path alone when the inode has one name).
func namesOfInodes(s Snapshot) map[string][]string {
	m := make(map[string][]string, len(s.Entries))
	for _, e := range s.Entries {
		m[e.Path] = []string{e.Path}
	}
	for _, g := range s.Links() {
		for _, p := range g {
			m[p] = g
		}
	}
	return m
}

func quoteAll(ps []string) string {
	q := make([]string, len(ps))
	for i, p := range ps {
		q[i] = strconv.Quote(p)
	}
	return "one inode named " + strings.Join(q, ", ")
}
