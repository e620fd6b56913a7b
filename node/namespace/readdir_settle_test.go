package node

// Regression test: readDirHere used to settle marks anywhere under the
// directory (settle(ctx, p, true)), so an in-doubt transaction on a deep
// descendant whose coordinator is down made readdir of every ancestor
// homed on a live node -- "/" included -- answer unavailable.
// Run: go test -tags hashicorpmetrics -run TestReadDirIgnoresDeepMarks ./node/

import (
	"fmt"
	"slices"
	"testing"
)

func TestReadDirIgnoresDeepMarks(t *testing.T) {
	c := newNSCluster(t, 3, nsTestConfig())
	root := c.homeOf(t, "/")
	for i := range 30 {
		d := fmt.Sprintf("/t%d", i)
		mustOK(t, c.via(root).mkdir(d, false), "mkdir")
		x := c.homeOf(t, d)
		if x == root {
			continue
		}
		armed := crashHook(c.ns(x), hookPrepared, nil)
		child, err := createRemoteChild(t, c, x, d, armed)
		t.Logf("create %s (coordinator %s): %v", child, x, err)
		if !slices.Contains(c.ns(root).marksSnapshot(), child) {
			c.restartNode(x)
			c.settleAll()
			continue
		}
		c.stopNode(x)
		c.waitSeen(x, false)
		if _, err := c.via(root).names("/"); err != nil {
			t.Fatalf("readdir / (home %s, up) while %s (coordinator of an in-doubt create of %s) is down: %v", root, x, child, err)
		}
		return
	}
	t.Skip("no suitable placement")
}
