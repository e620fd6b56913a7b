package routing

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAdaptiveSingleElement inserts one element repeatedly into a large
// empty filter: Algorithm 1 uses one more hash function each time, Algorithm
// 2 returns the insertion count, and both saturate at MaxExtra.
func TestAdaptiveSingleElement(t *testing.T) {
	for _, tc := range []struct {
		hash     HashKind
		maxExtra int
	}{{HashXX, 0}, {HashXX, 5}, {HashMD5, 5}, {HashMD5, 100}, {HashXX, 100}} {
		t.Run(fmt.Sprintf("%v/%d", tc.hash, tc.maxExtra), func(t *testing.T) {
			g := mustGeometry(t, 1<<14, 8, 0, tc.hash)
			a := NewAdaptiveFilter(g, tc.maxExtra)
			maxExtra := min(tc.maxExtra, MaxHashes-int(g.K))
			if a.MaxExtra() != maxExtra {
				t.Fatalf("MaxExtra = %d, want %d", a.MaxExtra(), maxExtra)
			}
			const p = "/only/element"
			if a.Query(p) != 0 || a.Test(p) {
				t.Fatal("empty filter reports the element")
			}
			for c := 1; c <= maxExtra+3; c++ {
				n := a.Add(p)
				if want := min(c-1, maxExtra+1); n != want {
					t.Fatalf("insertion %d: Add = %d, want %d", c, n, want)
				}
				if got, want := a.Query(p), min(c, maxExtra+1); got != want {
					t.Fatalf("after %d insertions: Query = %d, want %d", c, got, want)
				}
				if ones := a.Filter().Ones(); ones != uint64(int(g.K)+min(c-1, maxExtra)) {
					t.Fatalf("after %d insertions: %d bits set", c, ones)
				}
			}
			if !a.Test(p) || !a.Filter().Test(p) {
				t.Fatal("element not in the base filter")
			}
		})
	}
}

// TestAdaptiveNoUnderestimate inserts elements with random multiplicities
// (8 bits per insertion): every element's count is at least its
// multiplicity and no element is a false negative of the base filter.
func TestAdaptiveNoUnderestimate(t *testing.T) {
	for _, h := range hashKinds {
		t.Run(h.String(), func(t *testing.T) {
			const n = 4000
			g := mustGeometry(t, 3*n, 8, 0, h)
			a := NewAdaptiveFilter(g, 8)
			paths := filterTestPaths("abf", n, 40)
			r := rand.New(rand.NewPCG(41, 0))
			count := map[string]int{}
			for range 3 * n {
				// Skewed: low indices are inserted more often.
				p := paths[min(r.IntN(n), r.IntN(n))]
				a.Add(p)
				count[p]++
			}
			once, onceExact := 0, 0
			for p, c := range count {
				q := a.Query(p)
				if q < min(c, a.MaxExtra()+1) {
					t.Fatalf("%q inserted %d times: Query = %d", p, c, q)
				}
				if !a.Test(p) {
					t.Fatalf("%q: false negative", p)
				}
				if c == 1 {
					once++
					if q == 1 {
						onceExact++
					}
				}
			}
			// An element inserted once reads 1 unless the bit of H_{k+1}
			// was set by others: probability about the fill ratio.
			got, want := float64(onceExact)/float64(once), 1-a.Filter().FillRatio()
			t.Logf("%d distinct elements, %d inserted once, %.3f of those read 1 (1-fill %.3f)", len(count), once, got, want)
			if math.Abs(got-want) > 0.06 {
				t.Errorf("%.3f of single insertions read 1, want %.3f ± 0.06", got, want)
			}
			// Absent elements: Query is 0 unless a base false positive.
			fp := 0
			for _, p := range filterTestPaths("abf-absent", 10000, 42) {
				if a.Query(p) > 0 {
					fp++
				}
			}
			est := a.Filter().EstimatedFalsePositiveRate()
			t.Logf("absent positives %.4f, fill^k %.4f", float64(fp)/10000, est)
			if float64(fp)/10000 > 2*est+0.01 {
				t.Errorf("absent elements positive at %.4f, fill^k %.4f", float64(fp)/10000, est)
			}
		})
	}
}

func TestAdaptiveClamp(t *testing.T) {
	g := Geometry{M: 1024, K: 6, Hash: HashMD5}
	for _, tc := range []struct{ in, want int }{{-5, 0}, {0, 0}, {3, 3}, {26, 26}, {27, 26}, {1000, 26}} {
		if got := NewAdaptiveFilter(g, tc.in).MaxExtra(); got != tc.want {
			t.Errorf("NewAdaptiveFilter(maxExtra=%d).MaxExtra() = %d, want %d", tc.in, got, tc.want)
		}
	}
	a := NewAdaptiveFilter(g, 1000)
	if a.Geometry() != g || a.SizeBytes() != 128 {
		t.Fatalf("Geometry %v, SizeBytes %d", a.Geometry(), a.SizeBytes())
	}
	defer func() {
		if recover() == nil {
			t.Error("invalid geometry did not panic")
		}
	}()
	NewAdaptiveFilter(Geometry{M: 100, K: 1, Hash: HashXX}, 1)
}

func TestAdaptiveAllocs(t *testing.T) {
	a := NewAdaptiveFilter(mustGeometry(t, 1000, 8, 0, HashXX), 4)
	paths := filterTestPaths("aa", 100, 43)
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		a.Add(paths[i%len(paths)])
		a.Query(paths[(i+1)%len(paths)])
		i++
	}); n != 0 {
		t.Errorf("Add/Query allocate %v times", n)
	}
}
