package node

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ghba/ghba/node/namespace"
)

// TestPickGroup checks the auto group choice: fewest members below the
// maximum, ties by name, the first full group by name when all are full
// (also when one shows more members than the maximum: a group being split,
// whose movers gossip their new group late).
func TestPickGroup(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir = "x", t.TempDir()
	n, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := func(groups ...string) {
		var peers []namespace.Peer
		for i, g := range groups {
			peers = append(peers, namespace.Peer{ID: "p" + strconv.Itoa(i), Group: g, Up: true})
		}
		n.dir.peers.Store(&peers)
	}
	for _, tc := range []struct {
		groups []string
		max    int
		want   string // or one of these, separated by "|"
	}{
		{nil, 3, ""},
		{[]string{"a", "a", "b"}, 3, "b"},
		{[]string{"a", "b"}, 3, "a"},
		{[]string{"a", "a", "a", "b", "b", "b", "c", "c"}, 3, "c"},
		{[]string{"a", "a", "b", "b", "b"}, 2, "a"},
		{[]string{"a", "a", "b", "b", "c", "c", "c"}, 2, "a"},
		{[]string{"a", "a", "a", "a", "b", "b", "b"}, 3, "a"},
		{[]string{"b", "b", "b", "c", "c", "c", "c"}, 3, "b"},
	} {
		set(tc.groups...)
		seen := map[string]bool{}
		for range 50 {
			got := n.dir.pickGroup(tc.max)
			if !slices.Contains(strings.Split(tc.want, "|"), got) {
				t.Fatalf("pickGroup(%v, %d) = %q, want %q", tc.groups, tc.max, got, tc.want)
			}
			seen[got] = true
		}
		if want := len(strings.Split(tc.want, "|")); len(seen) != want {
			t.Errorf("pickGroup(%v, %d) chose %v in 50 tries, want each of %q", tc.groups, tc.max, seen, tc.want)
		}
	}
}

// TestHintTarget checks how a join hint (a split's redirect, a switch's
// target) is followed: its group while it has room, the group its via
// node gossips, nothing yet while neither is visible, and spent once the
// group it names is full.
func TestHintTarget(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir = "x", t.TempDir()
	n, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		groups []string // the group of peer p0, p1, ...
		hint   joinHint
		want   string
		spent  bool
	}{
		{"named group with room", []string{"a", "a", "a", "b"}, joinHint{group: "b", from: "a"}, "b", false},
		{"named group full", []string{"a", "a", "b", "b", "b"}, joinHint{group: "b", from: "a"}, "", true},
		{"not visible yet", []string{"a", "a", "a"}, joinHint{group: "b", from: "a"}, "", false},
		{"via's group with room", []string{"c", "a"}, joinHint{group: "b", via: "p0", from: "a"}, "c", false},
		{"via's group full", []string{"c", "c", "c"}, joinHint{group: "b", via: "p0", from: "a"}, "", true},
		{"via still in the old group", []string{"a", "a"}, joinHint{group: "b", via: "p0", from: "a"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var peers []namespace.Peer
			for i, g := range tc.groups {
				peers = append(peers, namespace.Peer{ID: "p" + strconv.Itoa(i), Group: g, Up: true})
			}
			n.dir.peers.Store(&peers)
			got, spent := n.dir.hintTarget(tc.hint, 3)
			if got != tc.want || spent != tc.spent {
				t.Errorf("hintTarget(%+v) = %q, %v; want %q, %v", tc.hint, got, spent, tc.want, tc.spent)
			}
		})
	}
}
