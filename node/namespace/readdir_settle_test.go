package namespace_test

// Regression test: readDirHere used to settle marks anywhere under the
// directory (settled with entries), so an in-doubt transaction on a deep
// descendant whose coordinator is down made readdir of every ancestor
// homed on a live node -- "/" included -- answer unavailable.
// Run: go test -tags hashicorpmetrics -run TestReadDirIgnoresDeepMarks ./node/

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/nodetest"
)

func TestReadDirIgnoresDeepMarks(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3})
	root := homeOf(c, t, "/")
	for i := range 30 {
		d := fmt.Sprintf("/t%d", i)
		mustOK(t, via(c, root).mkdir(d, false), "mkdir")
		x := homeOf(c, t, d)
		if x == root {
			continue
		}
		armed := crashHook(c.NS(x), namespace.HookPrepared, nil)
		child, err := createRemoteChild(t, c, x, d, armed)
		t.Logf("create %s (coordinator %s): %v", child, x, err)
		if !slices.Contains(c.NS(root).Marks(), child) {
			c.Restart(x)
			c.SettleAll()
			continue
		}
		c.Stop(x)
		c.WaitSeen(x, false)
		if _, err := via(c, root).names("/"); err != nil {
			t.Fatalf("readdir / (home %s, up) while %s (coordinator of an in-doubt create of %s) is down: %v", root, x, child, err)
		}
		return
	}
	t.Skip("no suitable placement")
}
