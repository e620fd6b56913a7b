package cachesim

import (
	"slices"
	"testing"

	"github.com/ghba/ghba/routing/nexus"
)

// TestPredictors checks each predictor of Nexus §2 on hand-made streams
// (letters are path ids: A = 0, B = 1, …).
func TestPredictors(t *testing.T) {
	pgOnly := func() predictor { return newPG() }
	tests := []struct {
		name   string
		mk     func() predictor
		stream string
		of     byte
		k      int
		want   string
	}{
		{"first successor", func() predictor { return newSuccessor(false) }, "ABACAD", 'A', 1, "B"},
		{"last successor", func() predictor { return newSuccessor(true) }, "ABACAD", 'A', 1, "D"},
		{"repeats collapse", func() predictor { return newSuccessor(false) }, "AAB", 'A', 1, "B"},
		{"unknown path", func() predictor { return newSuccessor(true) }, "AB", 'B', 1, ""},
		{"noah starts with the first successor", func() predictor { return newNoah(2) }, "ABAC", 'A', 1, "B"},
		{"noah changes after S in a row", func() predictor { return newNoah(2) }, "ABACAC", 'A', 1, "C"},
		{"noah keeps it after an interruption", func() predictor { return newNoah(2) }, "ABACACAB", 'A', 1, "C"},
		{"noah S=1 is last successor", func() predictor { return newNoah(1) }, "ABACAD", 'A', 1, "D"},
		{"recent popularity 2 of 4", func() predictor { return newRecentPopularity(2, 4) }, "ABACAB", 'A', 1, "B"},
		{"recent popularity: none reaches j", func() predictor { return newRecentPopularity(2, 4) }, "ABACAD", 'A', 1, ""},
		{"recent popularity forgets beyond k", func() predictor { return newRecentPopularity(2, 2) }, "ABABACAD", 'A', 1, ""},
		{"recent popularity tie to the most recent", func() predictor { return newRecentPopularity(1, 4) }, "ABAC", 'A', 1, "C"},
		{"pg1: most probable successor", pgOnly, "ABCABDABCAE", 'A', 1, "B"},
		{"pg2: then most probable after A B", pgOnly, "ABCABDABCAE", 'A', 2, "BC"},
		{"pg2: group members excluded", pgOnly, "ABAB", 'A', 2, "B"},
		{"pg2: tie to the most recent", pgOnly, "ABCABD", 'A', 2, "BD"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.mk()
			for i := 0; i < len(tc.stream); i++ {
				p.observe(int32(tc.stream[i] - 'A'))
			}
			var got []byte
			for _, q := range p.predict(nil, int32(tc.of-'A'), tc.k) {
				got = append(got, byte(q)+'A')
			}
			if string(got) != tc.want {
				t.Errorf("predict(%c, %d) after %s = %q, want %q", tc.of, tc.k, tc.stream, got, tc.want)
			}
		})
	}
}

// TestNexusPredictorIsTheGraph: the simulator's Nexus predictions are the
// paper's Table 2.
func TestNexusPredictorIsTheGraph(t *testing.T) {
	for _, tc := range []struct {
		window int
		want   []int32
	}{{2, []int32{2, 3}}, {3, []int32{1, 2}}} {
		mk := makePredictor(predKey{alg: Nexus, window: tc.window, assignment: nexus.Linear}, Options{})
		p, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range "ABCADCBA" {
			p.observe(int32(c - 'A'))
		}
		if got := p.predict(nil, 0, 2); !slices.Equal(got, tc.want) {
			t.Errorf("window %d: %v, want %v", tc.window, got, tc.want)
		}
	}
}
