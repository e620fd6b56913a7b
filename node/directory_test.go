package node

import (
	"strconv"
	"testing"

	"github.com/ghba/ghba/node/namespace"
)

// TestPickGroup checks the auto group choice: fewest members below the
// maximum, ties by name, the smallest full group when all are full.
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
		want   string
	}{
		{nil, 3, ""},
		{[]string{"a", "a", "b"}, 3, "b"},
		{[]string{"a", "b"}, 3, "a"},
		{[]string{"a", "a", "a", "b", "b", "b", "c", "c"}, 3, "c"},
		{[]string{"a", "a", "b", "b", "b"}, 2, "a"},
	} {
		set(tc.groups...)
		if got := n.dir.pickGroup(tc.max); got != tc.want {
			t.Errorf("pickGroup(%v, %d) = %q, want %q", tc.groups, tc.max, got, tc.want)
		}
	}
}
