package routing

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func newTestLRU(t testing.TB, capacity int) *LRU {
	t.Helper()
	return NewLRU(capacity, mustGeometry(t, capacity, 20, 0, HashXX))
}

func TestLRUTouchOrder(t *testing.T) {
	type step struct {
		touch   string
		evicted string // "" = none
		after   []string
	}
	tests := []struct {
		name  string
		cap   int
		steps []step
	}{
		{"fill", 3, []step{
			{"a", "", []string{"a"}},
			{"b", "", []string{"b", "a"}},
			{"c", "", []string{"c", "b", "a"}},
		}},
		{"evictLRU", 3, []step{
			{"a", "", []string{"a"}},
			{"b", "", []string{"b", "a"}},
			{"c", "", []string{"c", "b", "a"}},
			{"d", "a", []string{"d", "c", "b"}},
			{"e", "b", []string{"e", "d", "c"}},
		}},
		{"hitRefreshes", 3, []step{
			{"a", "", []string{"a"}},
			{"b", "", []string{"b", "a"}},
			{"c", "", []string{"c", "b", "a"}},
			{"a", "", []string{"a", "c", "b"}},
			{"a", "", []string{"a", "c", "b"}},
			{"b", "", []string{"b", "a", "c"}},
			{"d", "c", []string{"d", "b", "a"}},
		}},
		{"capOne", 1, []step{
			{"a", "", []string{"a"}},
			{"a", "", []string{"a"}},
			{"b", "a", []string{"b"}},
			{"c", "b", []string{"c"}},
		}},
		{"capZero", 0, []step{
			{"a", "", []string{}},
			{"b", "", []string{}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLRU(tt.cap, mustGeometry(t, max(tt.cap, 1), 20, 0, HashXX))
			if l.Cap() != tt.cap {
				t.Fatalf("Cap = %d", l.Cap())
			}
			for i, s := range tt.steps {
				ev, ok := l.Touch(s.touch)
				if ok != (s.evicted != "") || ev != s.evicted {
					t.Fatalf("step %d: Touch(%q) = %q, %v; want %q", i, s.touch, ev, ok, s.evicted)
				}
				if got := l.Paths(); !slices.Equal(got, s.after) || l.Len() != len(s.after) {
					t.Fatalf("step %d: list %v (Len %d), want %v", i, got, l.Len(), s.after)
				}
				if ok && (l.Contains(ev) || l.Filter().Test(ev)) {
					t.Fatalf("step %d: evicted %q still present", i, ev)
				}
				for _, p := range s.after {
					if !l.Contains(p) || !l.Filter().Test(p) {
						t.Fatalf("step %d: %q missing", i, p)
					}
				}
			}
		})
	}
}

func TestLRURemove(t *testing.T) {
	l := newTestLRU(t, 4)
	for _, p := range []string{"a", "b", "c", "d"} {
		l.Touch(p)
	}
	if l.Remove("x") {
		t.Fatal("Remove of an absent path = true")
	}
	for _, tc := range []struct {
		remove string
		after  []string
	}{
		{"b", []string{"d", "c", "a"}}, // middle
		{"d", []string{"c", "a"}},      // head
		{"a", []string{"c"}},           // tail
		{"c", []string{}},              // last
	} {
		if !l.Remove(tc.remove) {
			t.Fatalf("Remove(%q) = false", tc.remove)
		}
		if got := l.Paths(); !slices.Equal(got, tc.after) {
			t.Fatalf("after Remove(%q): %v, want %v", tc.remove, got, tc.after)
		}
		if l.Contains(tc.remove) || l.Filter().Test(tc.remove) {
			t.Fatalf("%q still present", tc.remove)
		}
	}
	if l.Filter().Ones() != 0 {
		t.Fatal("filter not empty")
	}
	// Freed nodes are reused: the list fills up again without evicting.
	for i, p := range []string{"e", "f", "g", "h"} {
		if _, ok := l.Touch(p); ok {
			t.Fatalf("insertion %d evicted", i)
		}
	}
	if ev, ok := l.Touch("i"); !ok || ev != "e" {
		t.Fatalf("Touch(i) evicted %q, %v", ev, ok)
	}
}

// lruModel is a trivially correct LRU: most recent first.
type lruModel struct {
	cap   int
	paths []string
}

func (m *lruModel) touch(p string) (string, bool) {
	if i := slices.Index(m.paths, p); i >= 0 {
		m.paths = slices.Delete(m.paths, i, i+1)
		m.paths = slices.Insert(m.paths, 0, p)
		return "", false
	}
	if m.cap == 0 {
		return "", false
	}
	m.paths = slices.Insert(m.paths, 0, p)
	if len(m.paths) > m.cap {
		ev := m.paths[len(m.paths)-1]
		m.paths = m.paths[:len(m.paths)-1]
		return ev, true
	}
	return "", false
}

func (m *lruModel) remove(p string) bool {
	if i := slices.Index(m.paths, p); i >= 0 {
		m.paths = slices.Delete(m.paths, i, i+1)
		return true
	}
	return false
}

// TestLRUModel compares random Touch/Remove sequences with the model and
// checks that the LRU filter has no false negative for the members and is
// exactly the plain filter of the members.
func TestLRUModel(t *testing.T) {
	for _, tc := range []struct {
		cap, universe int
		hash          HashKind
	}{{1, 5, HashXX}, {7, 20, HashXX}, {50, 80, HashMD5}, {200, 1000, HashXX}} {
		t.Run(fmt.Sprintf("cap%d/%v", tc.cap, tc.hash), func(t *testing.T) {
			g := mustGeometry(t, tc.cap, 20, 0, tc.hash)
			l := NewLRU(tc.cap, g)
			m := &lruModel{cap: tc.cap}
			paths := filterTestPaths("lru", tc.universe, 30)
			r := rand.New(rand.NewPCG(31, uint64(tc.cap)))
			replica, _ := DecodeFilter(l.Filter().AppendBinary(nil))
			for op := 0; op < 5000; op++ {
				p := paths[r.IntN(len(paths))]
				if r.IntN(10) == 0 {
					if got, want := l.Remove(p), m.remove(p); got != want {
						t.Fatalf("op %d: Remove(%q) = %v, want %v", op, p, got, want)
					}
				} else {
					ev, ok := l.Touch(p)
					wev, wok := m.touch(p)
					if ev != wev || ok != wok {
						t.Fatalf("op %d: Touch(%q) = %q, %v; want %q, %v", op, p, ev, ok, wev, wok)
					}
				}
				if l.Len() != len(m.paths) {
					t.Fatalf("op %d: Len %d, want %d", op, l.Len(), len(m.paths))
				}
				for _, q := range m.paths {
					if !l.Filter().Test(q) {
						t.Fatalf("op %d: LRU filter false negative for member %q", op, q)
					}
				}
				if op%100 == 0 {
					if got := l.Paths(); !slices.Equal(got, m.paths) {
						t.Fatalf("op %d: order %v, want %v", op, got, m.paths)
					}
					for _, q := range paths {
						if l.Contains(q) != slices.Contains(m.paths, q) {
							t.Fatalf("op %d: Contains(%q) wrong", op, q)
						}
					}
					plain := NewFilter(g)
					for _, q := range m.paths {
						plain.Add(q)
					}
					if !plain.Equal(l.Filter()) {
						t.Fatalf("op %d: LRU filter is not the filter of the list", op)
					}
					// Propagation: the replica follows through deltas.
					if err := replica.ApplyDelta(l.Filter().MarkDelta(nil)); err != nil || !replica.Equal(l.Filter()) {
						t.Fatalf("op %d: replica: %v", op, err)
					}
				}
			}
		})
	}
}

// TestLRUChangeTracking: hits change no bit; inserts and evictions do.
func TestLRUChangeTracking(t *testing.T) {
	l := newTestLRU(t, 100)
	paths := filterTestPaths("ct", 150, 32)
	for _, p := range paths[:100] {
		l.Touch(p)
	}
	f := l.Filter()
	f.Mark()
	for _, p := range paths[:100] {
		l.Touch(p)
	}
	if f.ChangedBits() != 0 {
		t.Fatalf("hits changed %d bits", f.ChangedBits())
	}
	for _, p := range paths[100:] {
		if _, ok := l.Touch(p); !ok {
			t.Fatal("insert into a full list did not evict")
		}
	}
	if f.ChangedBits() == 0 || f.ChangedFraction() <= 0 {
		t.Fatal("evictions changed no bit")
	}
}

func TestLRUTouchAllocs(t *testing.T) {
	l := newTestLRU(t, 64)
	paths := filterTestPaths("al", 200, 33)
	for _, p := range paths {
		l.Touch(p) // reach steady state
	}
	i := 0
	n := testing.AllocsPerRun(2000, func() {
		l.Touch(paths[i%len(paths)])
		if i%3 == 0 {
			l.Touch(paths[(i*7)%len(paths)])
		}
		i++
	})
	if n != 0 {
		t.Errorf("Touch allocates %v times per run", n)
	}
}

func TestLRUSizeBytes(t *testing.T) {
	const capacity = 1600
	l := newTestLRU(t, capacity)
	empty := l.SizeBytes()
	paths := filterTestPaths("sz", capacity, 34)
	pathBytes := 0
	for _, p := range paths {
		l.Touch(p)
		pathBytes += len(p)
	}
	if got := l.SizeBytes() - empty; got != pathBytes {
		t.Errorf("SizeBytes grew by %d, want the %d path bytes", got, pathBytes)
	}
	t.Logf("LRU of %d at 20 bits/entry: %.1f bytes/entry without paths (filter %.1f), %.1f with %.1f-byte paths",
		capacity, float64(empty)/capacity, float64(l.cf.SizeBytes())/capacity,
		float64(l.SizeBytes())/capacity, float64(pathBytes)/capacity)
}
