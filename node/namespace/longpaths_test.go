package namespace_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// TestLongPaths: paths past Linux's PATH_MAX (4,096 bytes) up to the
// cluster's limit are created, read, listed, renamed and removed like any
// other; a path past the limit is refused with rpc.ErrNameTooLong, and so
// is a directory rename that would make one in its subtree.
func TestLongPaths(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 2, Replication: 1})
	o := via(c, c.IDs[0])
	comp := strings.Repeat("c", 200)
	// A chain of directories whose deepest path is just within the limit.
	// One mkdir a level: the whole chain (about 160 levels) by one
	// mkdir -p outlasted the client's 30 s timeout on a loaded machine.
	deep := "/a"
	mustOK(t, o.mkdir(deep, false), "mkdir %s", deep)
	for len(deep)+1+len(comp) <= store.MaxPathLen-10 {
		deep += "/" + comp
		if err := o.mkdir(deep, false); err != nil {
			t.Fatalf("mkdir of a path of %d bytes: %s", len(deep), short(err))
		}
	}
	f := deep + "/f"
	if err := o.create(f); err != nil {
		t.Fatalf("create at %d bytes: %s", len(f), short(err))
	}
	if _, err := o.stat(f); err != nil {
		t.Fatalf("stat at %d bytes: %s", len(f), short(err))
	}
	if names, err := o.names(deep); err != nil || len(names) != 1 || names[0] != "f" {
		t.Fatalf("listing at %d bytes: %q, %s", len(deep), names, short(err))
	}
	if err := o.rename(f, deep+"/g"); err != nil {
		t.Fatalf("rename at %d bytes: %s", len(f), short(err))
	}
	over := deep + "/" + strings.Repeat("x", store.MaxPathLen-len(deep))
	if err := o.create(over); !errors.Is(err, rpc.ErrNameTooLong) || !errors.Is(err, rpc.ErrInvalidPath) {
		t.Errorf("create at %d bytes: %s, want rpc.ErrNameTooLong", len(over), short(err))
	}
	// Renaming the top directory to a longer name would take the
	// deepest path past the limit: refused, and nothing moved.
	longer := "/" + strings.Repeat("b", 255)
	if err := o.rename("/a", longer); !errors.Is(err, rpc.ErrNameTooLong) {
		t.Errorf("a rename that makes a path of %d bytes: %s, want rpc.ErrNameTooLong", len(deep)+len(longer), short(err))
	}
	if _, err := o.stat(deep + "/g"); err != nil {
		t.Errorf("after the refused rename: %s", short(err))
	}
	// A rename that keeps within the limit moves the whole chain.
	if err := o.rename("/a", "/z"); err != nil {
		t.Fatalf("rename /a /z: %s", short(err))
	}
	moved := "/z" + strings.TrimPrefix(deep, "/a") + "/g"
	if _, err := o.stat(moved); err != nil {
		t.Fatalf("stat %d bytes after the rename: %s", len(moved), short(err))
	}
	if err := o.unlink(moved); err != nil {
		t.Fatalf("unlink at %d bytes: %s", len(moved), short(err))
	}
}

// short returns err's message cut to 300 bytes: these paths are long.
func short(err error) string {
	if err == nil {
		return "<nil>"
	}
	if m := err.Error(); len(m) > 300 {
		return m[:150] + " ... " + m[len(m)-150:]
	}
	return err.Error()
}
