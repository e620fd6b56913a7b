package namespace_test

import (
	"fmt"
	"testing"

	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
)

// TestLookupLevels: after warm-up most lookups are resolved by L1 or L2 in
// at most one hop; a lookup at the home takes no hop; L4 is rare.
func TestLookupLevels(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3})
	var paths []string
	for d := range 10 {
		dir := fmt.Sprintf("/lv%d", d)
		mustOK(t, via(c, c.IDs[d%3]).mkdir(dir, false), "mkdir")
		paths = append(paths, dir)
		for f := range 30 {
			p := fmt.Sprintf("%s/f%d", dir, f)
			mustOK(t, via(c, c.IDs[f%3]).create(p), "create")
			paths = append(paths, p)
		}
	}
	c.WaitFilters()
	// Warm-up: touch every path at its home (the LRU lists fill), then
	// let the LRU filters propagate.
	for _, p := range paths {
		_, err := via(c, "n1").stat(p)
		mustOK(t, err, "stat %s", p)
	}
	c.WaitFilters()
	levels := map[string]int{}
	total, maxHops := 0, 0
	for _, id := range c.IDs {
		for _, p := range paths {
			st, err := via(c, id).stat(p)
			mustOK(t, err, "stat %s via %s", p, id)
			levels[st.Level]++
			total++
			maxHops = max(maxHops, st.Hops)
			if st.Home == id && st.Hops != 0 {
				t.Errorf("stat %s at its home %s took %d hops", p, id, st.Hops)
			}
			if (st.Level == rpc.LevelL1 || st.Level == rpc.LevelL2) && st.Hops > 1 {
				t.Errorf("stat %s via %s: %s in %d hops", p, id, st.Level, st.Hops)
			}
		}
	}
	hit := levels[rpc.LevelL1] + levels[rpc.LevelL2]
	t.Logf("levels %v of %d lookups, max hops %d", levels, total, maxHops)
	if hit < total*9/10 {
		t.Errorf("only %d of %d lookups resolved by L1/L2: %v", hit, total, levels)
	}
	if levels[rpc.LevelL1] < total/2 {
		t.Errorf("only %d of %d lookups resolved by L1", levels[rpc.LevelL1], total)
	}
	// Counters agree with the replies.
	var sum rpc.LevelCounts
	for _, id := range c.IDs {
		s := c.NS(id).Stats()
		sum.L1 += s.Levels.L1
		sum.L2 += s.Levels.L2
		sum.L4 += s.Levels.L4
		if s.FilterBytes <= 0 || s.L1Members != 2 || s.L2Members != 2 {
			t.Errorf("%s: stats %+v", id, s)
		}
	}
	if sum.L1+sum.L2+sum.L4 < uint64(total) {
		t.Errorf("level counters %+v below %d lookups", sum, total)
	}
	// Lookup (not stat) reports the same way.
	var r rpc.LookupResponse
	mustOK(t, via(c, "n2").call(rpc.MethodLookup, &rpc.LookupRequest{Path: paths[5]}, &r), "lookup")
	if r.Home == "" || r.Level == "" || r.Type != rpc.TypeFile {
		t.Errorf("lookup: %+v", r)
	}
	// Batch stat: one result per path, in order, errors in place.
	var br rpc.BatchStatResponse
	req := &rpc.BatchStatRequest{Paths: []string{paths[0], "/nope", "bad", paths[1]}}
	mustOK(t, via(c, "n3").call(rpc.MethodBatchStat, req, &br), "batch stat")
	if len(br.Results) != 4 || br.Results[0].Stat == nil || br.Results[0].Stat.Path != paths[0] ||
		errKind(br.Results[1].Err()) != "notexist" || errKind(br.Results[2].Err()) != "invalid" ||
		br.Results[3].Stat == nil || br.Results[3].Stat.Path != paths[1] {
		t.Errorf("batch stat: %+v", br.Results)
	}

	// A cache's prefetch: the first path is answered wherever it lives;
	// of the others, those a shard led by the entry node holds are
	// answered, the rest (homed elsewhere, missing) skipped, not looked up.
	var here, away string
	for _, p := range paths {
		if homeOf(c, t, p) == "n3" {
			here = p
		} else {
			away = p
		}
	}
	if here == "" || away == "" {
		t.Fatalf("no path homed at n3 (%q) or elsewhere (%q)", here, away)
	}
	before := c.NS("n3").Stats()
	br = rpc.BatchStatResponse{}
	req = &rpc.BatchStatRequest{Paths: []string{away, here, away + "x", "/nope", "bad"}, Prefetch: true}
	mustOK(t, via(c, "n3").call(rpc.MethodBatchStat, req, &br), "prefetch batch stat")
	res := br.Results
	if len(res) != 5 || res[0].Stat == nil || res[0].Stat.Path != away || res[0].Skipped ||
		res[1].Stat == nil || res[1].Stat.Path != here || res[1].Skipped ||
		!res[2].Skipped || res[2].Stat != nil || res[2].Err() != nil || !res[3].Skipped || !res[4].Skipped {
		t.Errorf("prefetch batch stat: %+v", res)
	}
	if after := c.NS("n3").Stats(); after.Lookups-before.Lookups != 2 || after.NotFound != before.NotFound {
		t.Errorf("%d lookups (%d not found) for the 2 paths answered", after.Lookups-before.Lookups, after.NotFound-before.NotFound)
	}
}

// TestLookupFalsePositive: a filter that claims a path it does not have
// costs a wasted verification, never a wrong answer.
func TestLookupFalsePositive(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3})
	mustOK(t, via(c, "n1").mkdir("/fp", false), "mkdir")
	mustOK(t, via(c, "n1").create("/fp/real"), "create")
	home := homeOf(c, t, "/fp/real")
	c.WaitFilters()
	// Make another node's local filter claim a missing path and the real
	// one: both arrays of the entry node point at the liar.
	liar := "n2"
	if home == liar {
		liar = "n3"
	}
	entry := "n1"
	if entry == home || entry == liar {
		entry = "n3"
		if entry == home || entry == liar {
			entry = "n2"
		}
	}
	ns := c.NS(liar)
	ns.LocalAdd("/fp/ghost")
	ns.LocalAdd("/fp/real")
	c.WaitFilters()
	if _, err := via(c, entry).stat("/fp/ghost"); errKind(err) != "notexist" {
		t.Errorf("stat of a false positive: %v", err)
	}
	st, err := via(c, entry).stat("/fp/real")
	mustOK(t, err, "stat real")
	if st.Home != home {
		t.Errorf("stat real: home %s, want %s", st.Home, home)
	}
	// A create goes first to the shard the filters name for its parent,
	// unverified: a liar there costs a second try, never a wrong answer.
	ns.LocalAdd("/ghostdir")
	ns.LocalAdd("/fp")
	c.WaitFilters()
	for _, tc := range []struct{ path, want string }{
		{"/ghostdir/x", "notexist"}, // the liar is the only hit for the parent
		{"/fp/real/x", "notdir"},
		{"/fp/real", "exist"},
		{"/fp/new", "ok"},
	} {
		if err := via(c, entry).create(tc.path); errKind(err) != tc.want {
			t.Errorf("create %s with a lying filter: %v, want %s", tc.path, err, tc.want)
		}
	}
}

// TestShardHostsNotKnownYet: a node whose Directory knows a shard but
// neither its leader nor any of its hosts (gossip has not brought them
// yet: a node that has just started or joined a group) still reaches the
// shard, through the node the shard is named after; it answers
// "unavailable" only once no node that may know the leader is up.
func TestShardHostsNotKnownYet(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Placement: "parent"})
	mustOK(t, via(c, "n1").mkdir("/known", false), "mkdir")
	mustOK(t, via(c, "n1").create("/known/f"), "create")
	home := homeOf(c, t, "/known/f")
	entry := "n1"
	if entry == home {
		entry = "n2"
	}
	c.WaitFilters()
	c.Dir.UpdateShard(home, func(s *namespace.ShardInfo) { s.Leader, s.Hosts = "", nil })
	st, err := via(c, entry).stat("/known/f")
	mustOK(t, err, "stat through %s with shard %s's hosts unknown", entry, home)
	if st.Home != home {
		t.Errorf("home %s, want %s", st.Home, home)
	}
	// With the shard's node down as well, nobody can tell the leader.
	// (The shard first: a snapshot that shows the node down, which
	// WaitSeen waits for, then shows both changes.)
	c.Dir.UpdateShard(home, func(s *namespace.ShardInfo) { s.Group = "elsewhere" })
	c.Dir.Update(home, func(p *namespace.Peer) { p.Up = false })
	c.WaitSeen(home, false)
	if _, err := via(c, entry).stat("/known/f"); errKind(err) != "unavailable" {
		t.Errorf("stat with the shard's node down and no host known: %v, want unavailable", err)
	}
}
