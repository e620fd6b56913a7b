package fsimport_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ghba/ghba/cmd/ghba/fsimport"
	"github.com/ghba/ghba/cmd/ghba/fsimport/fsimporttest"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// walkSource returns the source tree as the destination must hold it.
func walkSource(t *testing.T, root string) map[string]fsimporttest.Entry {
	t.Helper()
	tree, err := fsimporttest.Tree(root)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// walkDest reads the destination tree back through the client, keyed
// like fsimporttest.Tree.
func walkDest(t *testing.T, c *client.Client, root string) map[string]fsimporttest.Entry {
	t.Helper()
	ctx := context.Background()
	out := map[string]fsimporttest.Entry{}
	var walk func(p, rel string)
	walk = func(p, rel string) {
		st, err := c.Stat(ctx, p)
		if err != nil {
			t.Fatalf("stat %s: %v", p, err)
		}
		out[rel] = fsimporttest.FromInode(&st.Inode)
		if st.Type != rpc.TypeDir {
			return
		}
		entries, err := c.ReadDirAll(ctx, p, 0)
		if err != nil {
			t.Fatalf("readdir %s: %v", p, err)
		}
		for _, de := range entries {
			walk(path.Join(p, de.Name), path.Join(rel, de.Name))
		}
	}
	walk(root, ".")
	return out
}

func compareTrees(t *testing.T, want, got map[string]fsimporttest.Entry) {
	t.Helper()
	for _, d := range fsimporttest.Compare(want, got) {
		t.Error(d)
	}
}

// makeTree writes a small tree with the cases an import must handle.
func makeTree(t *testing.T, root string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"a/b/c", "a/empty", "d", "sticky"} {
		must(os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	for i, f := range []string{"top.txt", "a/one.go", "a/b/two.c", "a/b/c/three.h", "d/big.bin", "d/private"} {
		must(os.WriteFile(filepath.Join(root, f), []byte(strings.Repeat("x", i*1000)), 0o644))
	}
	for i := range 40 { // a directory with more entries than one batch of work
		must(os.WriteFile(filepath.Join(root, "d", "f"+string(rune('A'+i))), nil, 0o600))
	}
	must(os.Chmod(filepath.Join(root, "d/private"), 0o600))
	must(os.Chmod(filepath.Join(root, "sticky"), 0o1777))
	must(os.Symlink("a/one.go", filepath.Join(root, "link")))
	must(os.Symlink("/nowhere/at/all", filepath.Join(root, "a/dangling")))
	must(syscall.Mkfifo(filepath.Join(root, "d/fifo"), 0o644))
	// A device node needs root (CAP_MKNOD); elsewhere the tree has none.
	if err := syscall.Mknod(filepath.Join(root, "d/null"), syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil && !errors.Is(err, fs.ErrPermission) {
		t.Fatal(err)
	}
	old := time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
	must(os.Chtimes(filepath.Join(root, "a/one.go"), old, old))
	must(os.Chtimes(filepath.Join(root, "a/b"), old, old))
}

func run(t *testing.T, c *client.Client, o fsimport.Options) (fsimport.Summary, []fsimport.Change) {
	t.Helper()
	var changes []fsimport.Change
	o.OnChange = func(ch fsimport.Change) { changes = append(changes, ch) }
	o.OnError = func(p string, err error) { t.Errorf("import: %s: %v", p, err) }
	im, err := fsimport.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := im.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(changes, func(a, b fsimport.Change) int { return strings.Compare(a.Path, b.Path) })
	return sum, changes
}

// TestImport imports a tree into a 3-node cluster with 3 replicas per
// shard, reads it back, changes the source in every way an import must
// follow, and checks that a dry run reports exactly those changes, a
// second import applies exactly them, and a third finds nothing to do.
func TestImport(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 3})
	src := t.TempDir()
	makeTree(t, src)
	o := fsimport.Options{Source: src, Dest: "/imports/tree", Workers: 8}

	sum, _ := run(t, c.Client, o)
	want := walkSource(t, src)
	if sum.Created != int64(len(want)) || sum.Skipped != 0 || sum.Errors != 0 || sum.Updated+sum.Deleted+sum.Unchanged != 0 {
		t.Errorf("first import: %+v, want %d created (the special files too)", sum, len(want))
	}
	compareTrees(t, want, walkDest(t, c.Client, o.Dest))

	// Change the source: touch, grow, chmod, add, delete (a file and a
	// tree), turn a file into a directory, re-point a link.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	must(os.Chtimes(filepath.Join(src, "a/one.go"), now, now))
	must(os.WriteFile(filepath.Join(src, "a/b/two.c"), []byte("grown"), 0o644))
	must(os.Chmod(filepath.Join(src, "top.txt"), 0o640))
	must(os.WriteFile(filepath.Join(src, "a/new.txt"), []byte("new"), 0o644))
	must(os.Remove(filepath.Join(src, "d/fA")))
	must(os.RemoveAll(filepath.Join(src, "a/b/c")))
	must(os.Remove(filepath.Join(src, "d/private")))
	must(os.Mkdir(filepath.Join(src, "d/private"), 0o700))
	must(os.Remove(filepath.Join(src, "link")))
	must(os.Symlink("a/new.txt", filepath.Join(src, "link")))
	// Adding or removing an entry changes the directory's mtime: the root
	// (link), a, a/b (c removed; rewriting two.c does not count) and d.
	wantChanges := []string{
		"create /imports/tree/a/new.txt",
		"delete /imports/tree/a/b/c",
		"delete /imports/tree/a/b/c/three.h",
		"delete /imports/tree/d/fA",
		"update /imports/tree [mtime]",
		"update /imports/tree/a [mtime]",
		"update /imports/tree/a/b [mtime]",
		"update /imports/tree/a/b/two.c [size mtime]",
		"update /imports/tree/a/one.go [mtime]",
		"update /imports/tree/d [mtime]",
		"update /imports/tree/d/private [type]",
		"update /imports/tree/link [target]",
		"update /imports/tree/top.txt [mode]",
	}
	format := func(chs []fsimport.Change) []string {
		var out []string
		for _, ch := range chs {
			s := ch.Kind + " " + ch.Path
			if len(ch.Fields) > 0 {
				s += " [" + strings.Join(ch.Fields, " ") + "]"
			}
			out = append(out, s)
		}
		slices.Sort(out)
		return out
	}
	slices.Sort(wantChanges)

	dry := o
	dry.DryRun = true
	_, planned := run(t, c.Client, dry)
	if got := format(planned); !slices.Equal(got, wantChanges) {
		t.Errorf("dry run:\n got  %q\n want %q", got, wantChanges)
	}
	compareTrees(t, want, walkDest(t, c.Client, o.Dest)) // nothing changed

	sum, made := run(t, c.Client, o)
	if got := format(made); !slices.Equal(got, wantChanges) {
		t.Errorf("second import:\n got  %q\n want %q", got, wantChanges)
	}
	if sum.Created != 1 || sum.Deleted != 3 || sum.Updated != 9 {
		t.Errorf("second import: %+v", sum)
	}
	compareTrees(t, walkSource(t, src), walkDest(t, c.Client, o.Dest))

	sum, made = run(t, c.Client, o)
	if len(made) != 0 || sum.Unchanged != int64(len(walkSource(t, src))) {
		t.Errorf("third import changed %v: %+v", made, sum)
	}
}

// TestImportResumes cancels an import part-way and checks that a second
// run completes it to the same tree, creating only what the first did
// not.
func TestImportResumes(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 1})
	src := t.TempDir()
	makeTree(t, src)
	// Many directories, so that the import is cancelled with most of
	// their batches still to send.
	for i := range 30 {
		d := filepath.Join(src, "many", fmt.Sprintf("d%02d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for j := range 5 {
			if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d", j)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := walkSource(t, src)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var seen int
	im, err := fsimport.New(c.Client, fsimport.Options{Source: src, Dest: "/r", Workers: 4, OnChange: func(fsimport.Change) {
		if seen++; seen == 20 {
			cancel()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	first, err := im.Run(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled import: %v", err)
	}
	if first.Created < 20 || first.Created >= int64(len(want)) {
		t.Fatalf("cancelled import created %d of %d", first.Created, len(want))
	}
	second, changes := run(t, c.Client, fsimport.Options{Source: src, Dest: "/r"})
	// A create in flight when the import was cancelled may have been
	// made without its answer arriving: the resumed run finds it
	// unchanged. Nothing is made twice or undone. The cancelled run did
	// not set back the times of the directories it changed (the times of
	// those changes): the resumed run does, and those are its only
	// updates.
	var dirTimes int64
	for _, ch := range changes {
		if ch.Kind == fsimport.Update {
			if ch.Type != rpc.TypeDir || !slices.Equal(ch.Fields, []string{"mtime"}) {
				t.Errorf("resumed run updated %s %s %v; want only directories' times", ch.Type, ch.Path, ch.Fields)
			}
			dirTimes++
		}
	}
	if second.Created+second.Unchanged+second.Updated != int64(len(want)) || second.Created > int64(len(want))-first.Created ||
		second.Deleted != 0 || second.Updated != dirTimes || second.Errors != 0 {
		t.Errorf("resumed: %+v after %+v; want the rest of the %d paths created", second, first, len(want))
	}
	compareTrees(t, want, walkDest(t, c.Client, "/r"))
}

func TestImportRefusesBadDestinations(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 1})
	for _, d := range []string{"/", "relative", ""} {
		if _, err := fsimport.New(c.Client, fsimport.Options{Source: t.TempDir(), Dest: d}); !errors.Is(err, fsimport.ErrBadDest) {
			t.Errorf("dest %q: %v", d, err)
		}
	}
	if _, err := c.Client.Create(context.Background(), &rpc.CreateRequest{Path: "/file", Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	im, _ := fsimport.New(c.Client, fsimport.Options{Source: t.TempDir(), Dest: "/file"})
	if _, err := im.Run(context.Background()); !errors.Is(err, fsimport.ErrBadDest) {
		t.Errorf("dest is a file: %v", err)
	}
}

// TestImportBadEntry imports into a destination so deep that one source
// entry's path exceeds the namespace's limit: that entry fails alone, the
// other entries of its directory are created.
func TestImportBadEntry(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 1})
	src := t.TempDir()
	long := strings.Repeat("n", 200)
	for _, name := range []string{"a", "b", long, "c"} {
		if err := os.WriteFile(filepath.Join(src, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A destination so deep that only the long name passes the
	// cluster's limit on a full path.
	dest, target := "", store.MaxPathLen-100
	for len(dest)+251 <= target {
		dest += "/" + strings.Repeat("d", 250)
	}
	dest += "/" + strings.Repeat("e", target-len(dest)-1)
	var failed []string
	im, err := fsimport.New(c.Client, fsimport.Options{Source: src, Dest: dest,
		OnError: func(p string, err error) { failed = append(failed, path.Base(p)) }})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := im.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sum.Created != 4 || sum.Errors != 1 || !slices.Equal(failed, []string{long}) {
		t.Errorf("import: %+v, failed %d entries", sum, len(failed))
	}
	for _, name := range []string{"a", "b", "c"} {
		if _, err := c.Client.Stat(context.Background(), dest+"/"+name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// findText returns the paths below root whose text holds words, from
// every shard of c (paged).
func findText(t *testing.T, c *nodetest.Namespaces, root, words string) []string {
	t.Helper()
	var out []string
	for _, s := range c.IDs {
		req := rpc.FindRequest{Shard: s, Root: root, Text: words}
		for range 100 {
			var resp rpc.FindResponse
			if err := c.Client.CallAny(context.Background(), "", rpc.MethodFind, &req, &resp); err != nil {
				t.Fatalf("find text %q: %v", words, err)
			}
			for _, in := range resp.Inodes {
				out = append(out, in.Path)
			}
			if req.After = resp.Next; req.After == "" {
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestImportContent imports text files with Options.Content and checks
// what the text index finds: text files only (not binary, not invalid
// UTF-8, not empty), a limit that cuts a rune, a changed file re-read, a
// file without a text given one by a later import with Content, and
// nothing re-sent when nothing changed.
func TestImportContent(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 1})
	src := t.TempDir()
	files := map[string][]byte{
		"readme.md":     []byte("# ghba\nA metadata service with Bloom filter arrays.\n"),
		"main.go":       []byte("package main\n\n// The leader election loop.\nfunc main() {}\n"),
		"image.png":     append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR"), bytes.Repeat([]byte{0, 1, 2}, 100)...),
		"latin1.txt":    []byte("caf\xe9 cr\xe8me membership"),
		"empty.txt":     nil,
		"sub/notes.txt": []byte("Notes about membership and gossip."),
		"sub/long.txt":  []byte(strings.Repeat("word ", 20) + "élan tail-beyond-limit"),
	}
	for name, data := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dest := "/imports/content"
	// First without texts, then with: the text files get one.
	sum, _ := run(t, c.Client, fsimport.Options{Source: src, Dest: dest, Workers: 4})
	if sum.Created != int64(len(files)+2) { // and the destination and sub
		t.Fatalf("import: %+v", sum)
	}
	if got := findText(t, c, "/", "membership"); len(got) != 0 {
		t.Fatalf("texts indexed without Content: %v", got)
	}
	// 101 bytes: "word "×20 and the first byte of "é".
	o := fsimport.Options{Source: src, Dest: dest, Workers: 4, Content: 101}
	sum, changes := run(t, c.Client, o)
	var updated []string
	for _, ch := range changes {
		if ch.Kind == fsimport.Update && slices.Equal(ch.Fields, []string{"text"}) {
			updated = append(updated, path.Base(ch.Path))
		}
	}
	slices.Sort(updated)
	if want := []string{"long.txt", "main.go", "notes.txt", "readme.md"}; !slices.Equal(updated, want) || sum.Updated != int64(len(want)) {
		t.Errorf("texts added: %v (%+v), want %v", updated, sum, want)
	}
	tests := []struct {
		words string
		want  []string
	}{
		{"membership", []string{dest + "/sub/notes.txt"}},
		{"bloom filter", []string{dest + "/readme.md"}},
		{"leader election", []string{dest + "/main.go"}},
		{"word", []string{dest + "/sub/long.txt"}},
		{"élan", nil},
		{"png", nil},
	}
	for _, tc := range tests {
		if got := findText(t, c, "/", tc.words); !slices.Equal(got, tc.want) {
			t.Errorf("text %q: %v, want %v", tc.words, got, tc.want)
		}
	}
	// Nothing changed: nothing sent. A file changed: its text re-read.
	if sum, _ := run(t, c.Client, o); sum.Updated != 0 || sum.Created != 0 {
		t.Errorf("import of an unchanged tree: %+v", sum)
	}
	if err := os.WriteFile(filepath.Join(src, "sub/notes.txt"), []byte("Notes about Raft snapshots, longer now."), 0o644); err != nil {
		t.Fatal(err)
	}
	if sum, _ := run(t, c.Client, o); sum.Updated != 1 {
		t.Errorf("import after a change: %+v", sum)
	}
	if got := findText(t, c, "/", "membership"); len(got) != 0 {
		t.Errorf("the old text is still found: %v", got)
	}
	if got := findText(t, c, dest+"/sub", "raft snapshots"); !slices.Equal(got, []string{dest + "/sub/notes.txt"}) {
		t.Errorf("the new text: %v", got)
	}
}

// TestImportXattrs imports a tree with extended attributes (--xattrs):
// the "user." ones arrive with the entries, through batched and single
// creates; a later run sets the changed and new ones and removes those
// the source dropped, and one after that finds nothing to do.
func TestImportXattrs(t *testing.T) {
	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "d"), 0o755))
	must(os.WriteFile(filepath.Join(src, "d/f"), []byte("x"), 0o644))
	must(os.WriteFile(filepath.Join(src, "g"), []byte("y"), 0o644))
	if err := unix.Setxattr(filepath.Join(src, "d/f"), "user.a", []byte("1"), 0); errors.Is(err, unix.ENOTSUP) {
		t.Skip("the temporary directory's file system has no user extended attributes")
	} else {
		must(err)
	}
	must(unix.Setxattr(filepath.Join(src, "d/f"), "user.b", []byte{}, 0))
	must(unix.Setxattr(filepath.Join(src, "d"), "user.dir", []byte("yes"), 0))
	must(unix.Setxattr(src, "user.root", []byte("r"), 0)) // the destination's own, a single create
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 2, Replication: 1})
	o := fsimport.Options{Source: src, Dest: "/x", Workers: 4, Xattrs: true}
	xattrs := func(p string) string {
		t.Helper()
		st, err := c.Client.Stat(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range st.Inode.Xattrs {
			out = append(out, x.Name+"="+string(x.Value))
		}
		return strings.Join(out, " ")
	}
	run(t, c.Client, o)
	for p, want := range map[string]string{"/x/d/f": "user.a=1 user.b=", "/x/d": "user.dir=yes", "/x/g": "", "/x": "user.root=r"} {
		if got := xattrs(p); got != want {
			t.Errorf("after the import %s has %q, want %q", p, got, want)
		}
	}

	must(unix.Setxattr(filepath.Join(src, "d/f"), "user.a", []byte("2"), 0))
	must(unix.Removexattr(filepath.Join(src, "d/f"), "user.b"))
	must(unix.Setxattr(filepath.Join(src, "g"), "user.new", []byte("n"), 0))
	_, made := run(t, c.Client, o)
	var got []string
	for _, ch := range made {
		got = append(got, ch.Path+" "+strings.Join(ch.Fields, ","))
	}
	if want := []string{"/x/d/f xattrs", "/x/g xattrs"}; !slices.Equal(got, want) {
		t.Errorf("second import made %q, want %q", got, want)
	}
	if got := xattrs("/x/d/f") + " | " + xattrs("/x/g"); got != "user.a=2 | user.new=n" {
		t.Errorf("after the second import: %q", got)
	}
	if sum, made := run(t, c.Client, o); len(made) != 0 {
		t.Errorf("third import changed %v: %+v", made, sum)
	}
}

// TestImportHardLinks imports a tree whose files have several names
// (hard links), with one worker and with many: every name of a source
// file is one inode in the destination (one id, the link count of the
// names), other files keep one name. A later import follows a name
// removed from the source, puts back a name that the destination made a
// file of its own, gives its own inode to a name the source made a
// separate file, and changes nothing when nothing changed.
// TestImportHardLinksAsCopies imports a tree with a file of three names
// into a cluster whose shards do not write hard links yet (batch format 6,
// as while a node of a build without them is a member): the import says so
// once, and makes each name a file of its own with the same contents'
// size; a second import finds nothing to do (and counts the copies).
func TestImportHardLinksAsCopies(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 1, MaxLogFormat: store.BatchFormatV6})
	ctx := context.Background()
	src := t.TempDir()
	for _, d := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"a/one", "a/two", "b/three"}
	if err := os.WriteFile(filepath.Join(src, names[0]), []byte("shared"), 0o640); err != nil {
		t.Fatal(err)
	}
	for _, n := range names[1:] {
		if err := os.Link(filepath.Join(src, names[0]), filepath.Join(src, n)); err != nil {
			t.Fatal(err)
		}
	}
	var notices []string
	o := fsimport.Options{Source: src, Dest: "/copies", Workers: 4, OnNotice: func(msg string) { notices = append(notices, msg) }}
	sum, chs := run(t, c.Client, o)
	if sum.Links != 0 || sum.LinksAsCopies != 2 || sum.Errors != 0 || sum.Created != int64(len(walkSource(t, src))) {
		t.Errorf("import into a cluster without hard links: %+v, want 2 names as copies, no links", sum)
	}
	if len(notices) != 1 || !strings.Contains(notices[0], "cannot keep hard links") {
		t.Errorf("notices %q, want one saying the cluster cannot keep hard links", notices)
	}
	ids := map[uint64]string{}
	for _, n := range names {
		st, err := c.Client.Stat(ctx, "/copies/"+n)
		if err != nil {
			t.Fatalf("stat %s: %v", n, err)
		}
		if st.Size != int64(len("shared")) || st.Nlink != 1 || st.Mode&0o7777 != 0o640 {
			t.Errorf("%s: size %d, %d links, mode %#o; want 6 bytes, 1 link, 0640", n, st.Size, st.Nlink, st.Mode&0o7777)
		}
		if other, ok := ids[st.ID]; ok {
			t.Errorf("%s and %s are one inode (%d) in a cluster without hard links", n, other, st.ID)
		}
		ids[st.ID] = n
	}
	for _, ch := range chs {
		if slices.Contains(ch.Fields, "link") {
			t.Errorf("a change marked link: %+v", ch)
		}
	}
	notices = nil
	if sum, chs = run(t, c.Client, o); len(chs) != 0 || sum.LinksAsCopies != 2 || sum.Errors != 0 || sum.Unchanged != int64(len(walkSource(t, src))) {
		t.Errorf("second import: %+v, changes %v; want nothing to do, the 2 copies still counted", sum, chs)
	}
}

func TestImportHardLinks(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 1})
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	inode := func(p string) *rpc.StatResponse {
		t.Helper()
		st, err := c.Client.Stat(ctx, p)
		if err != nil {
			t.Fatalf("stat %s: %v", p, err)
		}
		return st
	}
	// sameInode checks that names are one inode with len(names) names.
	sameInode := func(dest string, names ...string) {
		t.Helper()
		first := inode(path.Join(dest, names[0]))
		for _, n := range names {
			st := inode(path.Join(dest, n))
			if st.ID != first.ID || st.Nlink != uint32(len(names)) {
				t.Errorf("%s: inode %d with %d names, want inode %d (%s's) with %d", n, st.ID, st.Nlink, first.ID, names[0], len(names))
			}
		}
	}
	// links lists the changes marked "link", as "kind path".
	links := func(chs []fsimport.Change) []string {
		var out []string
		for _, ch := range chs {
			if slices.Contains(ch.Fields, "link") {
				out = append(out, ch.Kind+" "+ch.Path)
			}
		}
		return out
	}
	for _, workers := range []int{1, 16} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			src := t.TempDir()
			dest := fmt.Sprintf("/links%d", workers)
			for _, d := range []string{"a", "b", "spread"} {
				must(os.Mkdir(filepath.Join(src, d), 0o755))
			}
			// a/one has 3 names in 2 directories; spread/f has 8 names in
			// 8 directories (more names than workers, met concurrently).
			must(os.WriteFile(filepath.Join(src, "a/one"), []byte("shared"), 0o640))
			must(os.Link(filepath.Join(src, "a/one"), filepath.Join(src, "a/two")))
			must(os.Link(filepath.Join(src, "a/one"), filepath.Join(src, "b/three")))
			must(os.WriteFile(filepath.Join(src, "b/plain"), []byte("alone"), 0o644))
			// Any file but a directory may have several names: a symbolic
			// link (os.Link does not follow it) and a FIFO.
			must(os.Symlink("one", filepath.Join(src, "a/sym")))
			must(os.Link(filepath.Join(src, "a/sym"), filepath.Join(src, "b/sym")))
			must(syscall.Mkfifo(filepath.Join(src, "a/fifo"), 0o600))
			must(os.Link(filepath.Join(src, "a/fifo"), filepath.Join(src, "b/fifo")))
			var spread []string
			for i := range 8 {
				name := fmt.Sprintf("spread/d%d/f", i)
				must(os.Mkdir(filepath.Join(src, path.Dir(name)), 0o755))
				if i == 0 {
					must(os.WriteFile(filepath.Join(src, name), nil, 0o600))
				} else {
					must(os.Link(filepath.Join(src, spread[0]), filepath.Join(src, name)))
				}
				spread = append(spread, name)
			}
			o := fsimport.Options{Source: src, Dest: dest, Workers: workers}

			sum, chs := run(t, c.Client, o)
			want := walkSource(t, src)
			if sum.Created != int64(len(want)) || sum.Links != 2+1+1+7 || sum.LinksAsCopies != 0 || sum.Errors != 0 {
				t.Errorf("first import: %+v, want %d created, 11 of them links", sum, len(want))
			}
			if got := links(chs); len(got) != 11 {
				t.Errorf("first import: %d changes marked link (%q), want 11", len(got), got)
			}
			compareTrees(t, want, walkDest(t, c.Client, dest))
			sameInode(dest, "a/one", "a/two", "b/three")
			sameInode(dest, "a/sym", "b/sym")
			sameInode(dest, "a/fifo", "b/fifo")
			sameInode(dest, spread...)
			sameInode(dest, "b/plain")
			if inode(dest+"/b/plain").ID == inode(dest+"/a/one").ID {
				t.Error("b/plain is a name of a/one's inode")
			}

			// A name removed from the source goes; the other two stay one
			// inode.
			must(os.Remove(filepath.Join(src, "b/three")))
			sum, chs = run(t, c.Client, o)
			if sum.Deleted != 1 || sum.Created != 0 || sum.Links != 0 || sum.Errors != 0 {
				t.Errorf("import after removing a name: %+v, want 1 deleted, no links", sum)
			}
			if got := links(chs); len(got) != 0 {
				t.Errorf("import after removing a name linked %q", got)
			}
			sameInode(dest, "a/one", "a/two")
			if _, err := c.Client.Stat(ctx, dest+"/b/three"); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("b/three after the import: %v, want it gone", err)
			}
			compareTrees(t, walkSource(t, src), walkDest(t, c.Client, dest))

			// Nothing changed: nothing to do.
			sum, chs = run(t, c.Client, o)
			if len(chs) != 0 || sum.Links != 0 || sum.Unchanged != int64(len(walkSource(t, src))) {
				t.Errorf("import of an unchanged tree: %+v, changes %v", sum, chs)
			}

			// A name that the destination holds as a file of its own (as
			// an import that kept no links made it) is linked again; a
			// dry run only says so. Either name may be the one kept (the
			// first met), and the other is replaced by a link to it.
			must(c.Client.Unlink(ctx, dest+"/a/two"))
			one := inode(dest + "/a/one")
			if _, err := c.Client.Create(ctx, &rpc.CreateRequest{Path: dest + "/a/two", Mode: one.Mode, Size: one.Size, Mtime: one.Mtime, AsGiven: true}); err != nil {
				t.Fatal(err)
			}
			relinked := func(got []string) bool {
				return slices.Equal(got, []string{"update " + dest + "/a/one"}) || slices.Equal(got, []string{"update " + dest + "/a/two"})
			}
			dry := o
			dry.DryRun = true
			if sum, chs = run(t, c.Client, dry); !relinked(links(chs)) || sum.Links != 1 {
				t.Errorf("dry run over a separate name: %+v, links %q", sum, links(chs))
			}
			if inode(dest+"/a/two").ID == one.ID {
				t.Error("the dry run linked a/two")
			}
			if sum, chs = run(t, c.Client, o); !relinked(links(chs)) || sum.Links != 1 || sum.Errors != 0 {
				t.Errorf("import over a separate name: %+v, links %q", sum, links(chs))
			}
			sameInode(dest, "a/one", "a/two")
			compareTrees(t, walkSource(t, src), walkDest(t, c.Client, dest))

			// The source makes a name a file of its own: so does the
			// destination (whichever of the two names keeps the inode).
			must(os.Remove(filepath.Join(src, "a/two")))
			must(os.WriteFile(filepath.Join(src, "a/two"), []byte("its own now"), 0o644))
			if sum, _ = run(t, c.Client, o); sum.Links != 0 || sum.Errors != 0 {
				t.Errorf("import after splitting a/two off: %+v", sum)
			}
			if a, b := inode(dest+"/a/one"), inode(dest+"/a/two"); a.ID == b.ID || a.Nlink > 1 || b.Nlink > 1 {
				t.Errorf("after splitting: a/one inode %d with %d names, a/two inode %d with %d", a.ID, a.Nlink, b.ID, b.Nlink)
			}
			compareTrees(t, walkSource(t, src), walkDest(t, c.Client, dest))
			if sum, chs = run(t, c.Client, o); len(chs) != 0 {
				t.Errorf("import of an unchanged tree: %+v, changes %v", sum, chs)
			}
		})
	}
}
