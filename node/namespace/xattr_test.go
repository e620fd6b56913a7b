package namespace_test

import (
	"bytes"
	"errors"
	"io/fs"
	"slices"
	"testing"

	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// TestXattrs checks extended attributes through the cluster at R=1 and
// R=3 (docs/design.md, "Extended attributes"): set, replace and remove
// with setxattr(2)'s flags and errors, each a change of the inode (new
// version and ctime), kept by renames of the file and of a directory
// above it, and the limits.
func TestXattrs(t *testing.T) { forEachR(t, testXattrs) }

func testXattrs(t *testing.T, r int) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: r})
	o := via(c, c.IDs[0])
	if err := o.mkdir("/d", false); err != nil {
		t.Fatal(err)
	}
	if err := o.create("/d/f"); err != nil {
		t.Fatal(err)
	}
	set := func(p string, ch rpc.XattrChange) error {
		_, err := o.setattr(&rpc.SetAttrRequest{Path: p, Xattr: &ch})
		return err
	}
	names := func(p string) []string {
		t.Helper()
		st, err := o.stat(p)
		if err != nil {
			t.Fatalf("stat %s: %v", p, err)
		}
		var out []string
		for _, x := range st.Xattrs {
			out = append(out, x.Name+"="+string(x.Value))
		}
		return out
	}
	before, err := o.stat("/d/f")
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		ch   rpc.XattrChange
		want error // nil: success
		then []string
	}{
		{"set", rpc.XattrChange{Name: "user.b", Value: []byte("2")}, nil, []string{"user.b=2"}},
		{"set before it", rpc.XattrChange{Name: "security.a", Value: []byte("1")}, nil, []string{"security.a=1", "user.b=2"}},
		{"empty value", rpc.XattrChange{Name: "trusted.e"}, nil, []string{"security.a=1", "trusted.e=", "user.b=2"}},
		{"create existing", rpc.XattrChange{Name: "user.b", Value: []byte("x"), Create: true}, fs.ErrExist, nil},
		{"replace missing", rpc.XattrChange{Name: "user.c", Value: []byte("x"), Replace: true}, rpc.ErrNoAttr, nil},
		{"replace", rpc.XattrChange{Name: "user.b", Value: []byte("3"), Replace: true}, nil, []string{"security.a=1", "trusted.e=", "user.b=3"}},
		{"remove", rpc.XattrChange{Name: "trusted.e", Remove: true}, nil, []string{"security.a=1", "user.b=3"}},
		{"remove missing", rpc.XattrChange{Name: "trusted.e", Remove: true}, rpc.ErrNoAttr, nil},
		{"system namespace", rpc.XattrChange{Name: "system.posix_acl_access", Value: []byte("x")}, errors.ErrUnsupported, nil},
		{"no namespace", rpc.XattrChange{Name: "plain", Value: []byte("x")}, errors.ErrUnsupported, nil},
		{"a namespace alone", rpc.XattrChange{Name: "user.", Value: []byte("x")}, fs.ErrInvalid, nil},
		{"create and replace, missing", rpc.XattrChange{Name: "user.z", Create: true, Replace: true}, rpc.ErrNoAttr, nil},
		{"create and replace, existing", rpc.XattrChange{Name: "user.b", Create: true, Replace: true}, fs.ErrExist, nil},
		{"value too long", rpc.XattrChange{Name: "user.z", Value: make([]byte, store.MaxXattrValueLen+1)}, fs.ErrInvalid, nil},
	}
	version := before.Version
	for _, s := range steps {
		err := set("/d/f", s.ch)
		if s.want != nil {
			if !errors.Is(err, s.want) {
				t.Errorf("%s: err %v, want %v", s.name, err, s.want)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := names("/d/f"); !slices.Equal(got, s.then) {
			t.Errorf("%s: attributes %q, want %q", s.name, got, s.then)
		}
		st, _ := o.stat("/d/f")
		if st.Version <= version || st.Ctime <= before.Ctime {
			t.Errorf("%s: version %d ctime %d, want past %d and %d", s.name, st.Version, st.Ctime, version, before.Ctime)
		}
		version = st.Version
	}

	// Renames keep them: the file's own, and a directory's above it.
	if err := set("/d", rpc.XattrChange{Name: "user.dir", Value: []byte("yes")}); err != nil {
		t.Fatal(err)
	}
	if err := o.rename("/d/f", "/d/g"); err != nil {
		t.Fatal(err)
	}
	if err := o.rename("/d", "/e"); err != nil {
		t.Fatal(err)
	}
	if got, want := names("/e/g"), []string{"security.a=1", "user.b=3"}; !slices.Equal(got, want) {
		t.Errorf("after the renames /e/g has %q, want %q", got, want)
	}
	if got, want := names("/e"), []string{"user.dir=yes"}; !slices.Equal(got, want) {
		t.Errorf("after its rename /e has %q, want %q", got, want)
	}
	// A chmod keeps them.
	if _, err := o.setattr(&rpc.SetAttrRequest{Path: "/e/g", Mode: u32(0o600)}); err != nil {
		t.Fatal(err)
	}
	if got := names("/e/g"); len(got) != 2 {
		t.Errorf("after a chmod /e/g has %q", got)
	}

	// The limit of all of an inode's attributes: no space.
	half := bytes.Repeat([]byte("v"), store.MaxXattrsLen/2)
	if err := set("/e", rpc.XattrChange{Name: "user.h1", Value: half}); err != nil {
		t.Fatal(err)
	}
	if err := set("/e", rpc.XattrChange{Name: "user.h2", Value: half}); !errors.Is(err, rpc.ErrNoSpace) {
		t.Errorf("past the limit: %v, want rpc.ErrNoSpace", err)
	}
	if err := set("/e", rpc.XattrChange{Name: "user.h1", Remove: true}); err != nil {
		t.Fatal(err)
	}
	if err := set("/e", rpc.XattrChange{Name: "user.h2", Value: half}); err != nil {
		t.Errorf("after a remove, within the limit again: %v", err)
	}
}
