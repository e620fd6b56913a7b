package node_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing"
	"time"

	"github.com/ghba/ghba/node"
	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/rpctest"
	"go.uber.org/goleak"
)

// TestClientRoutesByFilters: a client with no home cache that routes by the
// shards' filters (client.Options.RouteRefresh) sends each stat to the node
// that leads the path's shard, so that the node answers it from its own
// store (0 hops) — on a G-HBA group of 3 whose nodes hold their segment
// alone, where a node asked about another's path takes the group multicast
// (two stats in three). Routing is a hint: after an unlink and a rename the
// client's filters are stale and the answers still right.
func TestClientRoutesByFilters(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	log := rpctest.Logger(t)
	specs := []groupSpec{{"r1", "g"}, {"r2", "g"}, {"r3", "g"}}
	nodes := startGroups(t, log, specs, func(_ int, c *node.Config) {
		c.Placement = namespace.PlacementBalanced // files spread over every shard
	})
	defer func() {
		for _, n := range nodes {
			nodetest.Shutdown(t, n)
		}
	}()
	checkGroup(t, 30*time.Second, nodes, []string{"r1", "r2", "r3"})
	shardsSettled(t, time.Minute, nodes, []string{"r1", "r2", "r3"}, nodes[0].Config().Replication)
	addrs := nodeAddrs(nodes)
	writer := client.New(client.Options{Addrs: addrs, HomeCacheSize: -1})
	defer writer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	paths := createSpread(t, ctx, writer, nodes, 60, 3)
	for _, n := range nodes {
		n.NS().SyncFilters() // a new filter version for the client to fetch
	}

	reader := client.New(client.Options{Addrs: addrs, HomeCacheSize: -1, RouteRefresh: time.Hour})
	defer reader.Close()
	rpctest.Eventually(t, 20*time.Second, "the client holds every shard's filter", func() error {
		if err := reader.RefreshFilters(ctx); err != nil {
			return err
		}
		if got := reader.RoutedShards(); len(got) != 3 {
			return fmt.Errorf("routed shards %v", got)
		}
		return nil
	})
	direct := 0
	for _, p := range paths {
		st, err := reader.Stat(ctx, p)
		if err != nil {
			t.Fatalf("stat %s: %v", p, err)
		}
		if st.Hops == 0 {
			direct++
		}
	}
	t.Logf("%d of %d stats answered by the node they were sent to", direct, len(paths))
	if direct < len(paths)-2 { // a false positive in the client's filters may send one astray
		t.Errorf("%d of %d stats took no hop, want all but at most 2", direct, len(paths))
	}

	// Stale filters: the client still routes the old paths to their old
	// homes, which answer right.
	if err := writer.Unlink(ctx, paths[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Rename(ctx, paths[1], "/d/renamed"); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Stat(ctx, paths[0]); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat of an unlinked path: %v, want ErrNotExist", err)
	}
	if _, err := reader.Stat(ctx, paths[1]); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat of a renamed path: %v, want ErrNotExist", err)
	}
	if _, err := reader.Stat(ctx, "/d/renamed"); err != nil {
		t.Errorf("stat of the rename's destination: %v", err)
	}
}
