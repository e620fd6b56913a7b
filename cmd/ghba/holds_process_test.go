package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProcessMountOpenUnlinked: a file that one mount has open and another
// removes keeps its contents for the open descriptor past the data store's
// grace period (the mount holds it, docs/design.md "Holds"), while a
// removed file nobody has open loses its objects after the grace, also
// across a kill -9 of the leader of their shard; fstat of the open
// descriptor shows no link. After the last close, the held file's objects
// go too. Once for a file with one name, once for one with two (held where
// its record is).
func TestProcessMountOpenUnlinked(t *testing.T) {
	const grace = 2 * time.Second
	c := mountClusterWith(t, "", fmt.Sprintf("data_gc_grace: %s\n", grace))
	a, b := c.mount("a"), c.mount("b")
	content := bytes.Repeat([]byte("held open "), 600_000) // 6 MB: two 4 MiB blocks
	home := func(name string) string {
		out, errOut, code := c.all("--json", "stat", "/"+name)
		var st struct{ Home string }
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Home == "" {
			t.Fatalf("ghba stat /%s: exit %d: %s%s", name, code, out, errOut)
		}
		return st.Home
	}
	// objects returns a count of the objects of name's inode in the data
	// store.
	objects := func(name string) func() int {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(a.dir, name), &st); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(c.dir, "data-store", "blocks", fmt.Sprintf("%016x", st.Ino))
		return func() int {
			ents, _ := os.ReadDir(dir)
			n := 0
			for _, e := range ents {
				if !strings.HasSuffix(e.Name(), ".attrs") {
					n++
				}
			}
			return n
		}
	}
	for _, tc := range []struct {
		name   string
		linked bool
	}{{"one-name", false}, {"two-names", true}} {
		t.Run(tc.name, func(t *testing.T) {
			heldName := "held-" + tc.name
			// The witness is a file homed with the held one (with its
			// record), so that one round of that shard's collection sees
			// both. Placement picks the less loaded of two random shards,
			// so the held file's shard, once it has one more file, comes
			// up in about one try in nine: empty files are tried (a try
			// writes nothing to the data store), and the one homed there
			// gets the contents.
			if err := os.WriteFile(filepath.Join(a.dir, heldName), content, 0o644); err != nil {
				t.Fatal(err)
			}
			want := home(heldName)
			witnessName := ""
			for i := 1; witnessName == ""; i++ {
				if i > 300 {
					t.Fatal("no file homed with the held one")
				}
				name := fmt.Sprintf("witness-%s-%d", tc.name, i)
				if err := os.WriteFile(filepath.Join(a.dir, name), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				if home(name) != want {
					if err := os.Remove(filepath.Join(a.dir, name)); err != nil {
						t.Fatal(err)
					}
					continue
				}
				witnessName = name
				if err := os.WriteFile(filepath.Join(a.dir, name), content, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			names := []string{heldName}
			if tc.linked {
				names = append(names, heldName+".link")
				if err := os.Link(filepath.Join(a.dir, heldName), filepath.Join(a.dir, names[1])); err != nil {
					t.Fatal(err)
				}
			}
			held, witness := objects(heldName), objects(witnessName)
			if held() != 2 || witness() != 2 {
				t.Fatalf("objects before: held %d, witness %d; want 2 each", held(), witness())
			}
			// Opened by its last name (another shard may home it than
			// the record's).
			f, err := os.Open(filepath.Join(a.dir, names[len(names)-1]))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			head := make([]byte, 10)
			if _, err := io.ReadFull(f, head); err != nil {
				t.Fatal(err)
			}
			heldHome := home(heldName)
			for _, name := range append(names, witnessName) {
				if err := os.Remove(filepath.Join(b.dir, name)); err != nil {
					t.Fatal(err)
				}
			}
			// kill -9 of the node named as the shard (its preferred
			// leader): the next leader knows no hold, so it deletes
			// nothing until the mount has renewed with it.
			for _, n := range c.nodes {
				if n.id == heldHome {
					c.kill(n)
					c.start(n)
					c.waitReady(n.id+" restarted and the cluster whole", c.nodes...)
				}
			}
			// The witness, which nobody has open, goes after the grace;
			// the round of its shard's collection that deleted it saw the
			// held file's trash, whose grace had passed too.
			c.waitFor("the removed file's objects deleted", procReadyTimeout, nil, func() (bool, string) {
				return witness() == 0, fmt.Sprintf("%d objects left", witness())
			})
			if n := held(); n != 2 {
				t.Fatalf("the open file's objects after the grace: %d, want 2", n)
			}
			rest, err := io.ReadAll(f)
			if err != nil || !bytes.Equal(append(head, rest...), content) {
				t.Fatalf("reading the open file after another mount removed it: %d bytes, %v", 10+len(rest), err)
			}
			var st syscall.Stat_t
			if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Nlink != 0 || st.Size != int64(len(content)) {
				t.Fatalf("fstat of the open file: nlink %d, size %d, %v; want 0 links and %d bytes", st.Nlink, st.Size, err, len(content))
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			c.waitFor("the closed file's objects deleted", procReadyTimeout, nil, func() (bool, string) {
				return held() == 0, fmt.Sprintf("%d objects left", held())
			})
		})
	}
}
