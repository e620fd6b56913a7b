package namespace_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
)

// TestColocatePlacement: with PlacementColocate a directory's first
// SpreadAfter files share its shard (each create one commit in one shard,
// no transaction), and its further files spread over the other shards.
func TestColocatePlacement(t *testing.T) {
	const spread = 5
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{
		Nodes: 3, Placement: namespace.PlacementColocate,
		Configure: func(o *namespace.Options) { o.SpreadAfter = spread },
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := c.NS(c.IDs[0])
	if _, err := ns.Mkdir(ctx, &rpc.MkdirRequest{Path: "/d", Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	dirHome := homeOf(c, t, "/d")
	txns := func() uint64 {
		var n uint64
		for _, id := range c.IDs {
			n += c.NS(id).Stats().TxnsCommitted
		}
		return n
	}
	before := txns()
	for i := range spread {
		p := fmt.Sprintf("/d/f%d", i)
		if _, err := ns.Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		if h := homeOf(c, t, p); h != dirHome {
			t.Errorf("%s homed on %s, want its directory's shard %s", p, h, dirHome)
		}
	}
	if d := txns() - before; d != 0 {
		t.Errorf("%d transactions for %d colocated creates, want 0", d, spread)
	}
	elsewhere := 0
	for i := spread; i < spread+30; i++ {
		p := fmt.Sprintf("/d/f%d", i)
		if _, err := ns.Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		if homeOf(c, t, p) != dirHome {
			elsewhere++
		}
	}
	// Past the threshold files are placed as balanced: the less loaded of
	// two random shards, and the directory's shard holds the most files.
	if elsewhere < 10 {
		t.Errorf("%d of 30 files past the spread threshold left the directory's shard, want most", elsewhere)
	}
}
