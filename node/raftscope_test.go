package node

import (
	"testing"
)

// TestGroupRaftScope checks which group a group Raft's connections name
// and which it accepts, through a switch from g2 to g1: the old Raft,
// still open while the node has begun the switch, names g2 and accepts
// nothing; the new one names and accepts g1, and refuses g2.
func TestGroupRaftScope(t *testing.T) {
	n := &Node{}
	old, fresh := &groupRaft{}, &groupRaft{}
	type check struct {
		gr      *groupRaft
		current string
		accepts map[string]bool
	}
	steps := []struct {
		name   string
		change func()
		checks []check
	}{
		{"a new auto node", func() {}, []check{
			{old, "", map[string]bool{"g1": true, "g2": true}},
		}},
		{"a member of g2", func() { n.groupName = "g2" }, []check{
			{old, "g2", map[string]bool{"g1": false, "g2": true}},
		}},
		{"switching from g2 to g1, the old raft open", func() {
			n.movingFrom, n.groupName, n.hint = "g2", "", joinHint{group: "g1"}
			old.leaving = "g2"
		}, []check{
			{old, "g2", map[string]bool{"g1": false, "g2": false}},
			{fresh, "g1", map[string]bool{"g1": true, "g2": false, "g3": true}},
		}},
		{"joined g1", func() { n.groupName, n.movingFrom, n.hint = "g1", "", joinHint{} }, []check{
			{fresh, "g1", map[string]bool{"g1": true, "g2": false}},
		}},
	}
	for _, s := range steps {
		s.change()
		for i, c := range s.checks {
			sc := n.groupRaftScope(c.gr)
			if got := sc.Current(); got != c.current {
				t.Errorf("%s: raft %d dials naming %q, want %q", s.name, i, got, c.current)
			}
			for g, want := range c.accepts {
				if got := sc.Accepts(g); got != want {
					t.Errorf("%s: raft %d accepts %q: %v, want %v", s.name, i, g, got, want)
				}
			}
		}
	}
}
