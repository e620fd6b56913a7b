package namespace

import "github.com/ghba/ghba/rpc"

// LevelCounts returns the lookups entered at this node by the level that
// resolved them: the part of Stats the web console samples, without
// Stats' count of every led shard's inodes.
func (n *Namespace) LevelCounts() rpc.LevelCounts {
	c := &n.counters
	return rpc.LevelCounts{L1: c.l1.Load(), L2: c.l2.Load(), L3: c.l3.Load(), L4: c.l4.Load()}
}
