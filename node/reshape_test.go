package node

import "testing"

func TestGroupNumber(t *testing.T) {
	for _, c := range []struct {
		name string
		k    int
		ok   bool
	}{
		{"g1", 1, true}, {"g12", 12, true}, {"g4-node7", 4, true}, {"g4-n-7", 4, true},
		{"ga", 0, false}, {"g", 0, false}, {"g0", 0, false}, {"x3", 0, false}, {"g-1", 0, false},
	} {
		if k, ok := groupNumber(c.name); k != c.k || ok != c.ok {
			t.Errorf("groupNumber(%q) = %d, %v; want %d, %v", c.name, k, ok, c.k, c.ok)
		}
	}
}
