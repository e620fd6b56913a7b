package routing

import (
	"fmt"
	"testing"
)

func newTestFrequencyLRU(t testing.TB, capacity int) *FrequencyLRU {
	t.Helper()
	return NewFrequencyLRU(capacity, mustGeometry(t, max(capacity, 1), 20, 0, HashXX))
}

// TestFrequencyLRUAdmission checks that a path enters the list on its
// second sighting within the window, not its first, and that a listed path
// is refreshed by every access as in LRU.
func TestFrequencyLRUAdmission(t *testing.T) {
	type step struct {
		touch    string
		admitted bool
		evicted  string   // "" = none
		list     []string // the list afterwards, most recent first
	}
	tests := []struct {
		name     string
		capacity int
		steps    []step
	}{
		{"second sighting admits", 4, []step{
			{"a", false, "", []string{}},
			{"a", true, "", []string{"a"}},
			{"a", true, "", []string{"a"}},
		}},
		{"interleaved", 4, []step{
			{"a", false, "", []string{}},
			{"b", false, "", []string{}},
			{"c", false, "", []string{}},
			{"b", true, "", []string{"b"}},
			{"a", true, "", []string{"a", "b"}},
		}},
		{"hit refreshes recency, eviction is LRU", 2, []step{
			{"a", false, "", []string{}},
			{"a", true, "", []string{"a"}},
			{"b", false, "", []string{"a"}},
			{"b", true, "", []string{"b", "a"}},
			{"a", true, "", []string{"a", "b"}},
			{"c", false, "", []string{"a", "b"}},
			{"c", true, "b", []string{"c", "a"}},
		}},
		{"zero capacity never admits", 0, []step{
			{"a", false, "", []string{}},
			{"a", false, "", []string{}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFrequencyLRU(t, tc.capacity)
			for i, s := range tc.steps {
				ev, ok, adm := f.Touch(s.touch)
				if adm != s.admitted || ok != (s.evicted != "") || ev != s.evicted {
					t.Fatalf("step %d Touch(%q) = %q, %v, admitted %v; want %q, admitted %v", i, s.touch, ev, ok, adm, s.evicted, s.admitted)
				}
				if got := f.LRU().Paths(); fmt.Sprint(got) != fmt.Sprint(s.list) {
					t.Fatalf("step %d: list %v, want %v", i, got, s.list)
				}
				for _, p := range s.list {
					if !f.Filter().Test(p) {
						t.Fatalf("step %d: listed %q not in the LRU filter", i, p)
					}
				}
			}
		})
	}
}

// TestFrequencyLRUScanKeepsHotSet touches a hot set repeatedly, then scans
// many distinct paths once each: the frequency-admitted list keeps the hot
// set, plain LRU loses it.
func TestFrequencyLRUScanKeepsHotSet(t *testing.T) {
	const capacity, hotN, scanN = 100, 60, 20000
	hot := filterTestPaths("hot", hotN, 71)
	scan := filterTestPaths("scan", scanN, 72)
	f := newTestFrequencyLRU(t, capacity)
	l := newTestLRU(t, capacity)
	for range 4 {
		for _, p := range hot {
			f.Touch(p)
			l.Touch(p)
		}
	}
	for _, p := range hot {
		if !f.Contains(p) || !l.Contains(p) {
			t.Fatalf("hot %q not listed before the scan", p)
		}
	}
	for _, p := range scan {
		f.Touch(p)
		l.Touch(p)
	}
	keptF, keptL := 0, 0
	for _, p := range hot {
		if f.Contains(p) {
			keptF++
		}
		if l.Contains(p) {
			keptL++
		}
	}
	if keptF != hotN {
		t.Errorf("frequency admission kept %d of %d hot paths after a scan of %d", keptF, hotN, scanN)
	}
	if keptL != 0 {
		t.Errorf("plain LRU kept %d hot paths after the scan; the test needs it to lose them", keptL)
	}
	// Scan paths admitted by a false positive of the sketch: under 1%.
	if false1 := f.Admissions() - hotN; false1 > scanN/100 {
		t.Errorf("%d of %d scanned paths admitted (sketch false positives), want < 1%%", false1, scanN)
	}
	if f.Clears() == 0 {
		t.Errorf("no clear of the sketch over %d accesses, window %d", 4*hotN+scanN, f.Window())
	}
}

// TestFrequencyLRUWindowAging checks that the sketch forgets at the end of
// each window: a second sighting within W accesses admits, a second
// sighting after the clear counts as a first one.
func TestFrequencyLRUWindowAging(t *testing.T) {
	const capacity = 10
	tests := []struct {
		name string
		gap  int // distinct other accesses between the two sightings of x
		want bool
	}{
		{"same window", AdmissionWindowFactor*capacity - 2, true},
		{"next window", AdmissionWindowFactor*capacity - 1, false},
		{"much later", 3 * AdmissionWindowFactor * capacity, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFrequencyLRU(t, capacity)
			if f.Window() != AdmissionWindowFactor*capacity {
				t.Fatalf("window %d, want %d", f.Window(), AdmissionWindowFactor*capacity)
			}
			f.Touch("/x")
			for i, p := range filterTestPaths("gap", tc.gap, 73) {
				if _, _, adm := f.Touch(p); adm {
					t.Logf("gap path %d admitted (sketch false positive)", i)
				}
			}
			before := f.Count("/x")
			if _, _, adm := f.Touch("/x"); adm != tc.want {
				t.Errorf("second sighting after %d others (count before %d, clears %d): admitted %v, want %v",
					tc.gap, before, f.Clears(), adm, tc.want)
			}
			if !tc.want {
				// After the clear, a third sighting is the second of the window.
				if _, _, adm := f.Touch("/x"); !adm {
					t.Errorf("third sighting (second of the new window) not admitted")
				}
			}
		})
	}
}

func TestFrequencyLRUTouchAllocs(t *testing.T) {
	f := newTestFrequencyLRU(t, 64)
	paths := filterTestPaths("fa", 2000, 34)
	for _, p := range paths {
		f.Touch(p) // reach steady state: list full, sketch cleared at least once
	}
	for range 3 {
		for _, p := range paths[:200] {
			f.Touch(p)
		}
	}
	i := 0
	n := testing.AllocsPerRun(5000, func() {
		f.Touch(paths[i%len(paths)])
		if i%3 == 0 {
			f.Touch(paths[(i*7)%200])
		}
		i++
	})
	if n != 0 {
		t.Errorf("Touch allocates %v times per run", n)
	}
	if f.Clears() < 2 {
		t.Errorf("only %d clears: the run did not cross windows", f.Clears())
	}
}

func TestFrequencyLRUSizeBytes(t *testing.T) {
	f := newTestFrequencyLRU(t, 1600)
	// W = 16,000 accesses at 10 bits: 160,000 bits = 20,000 bytes.
	if got := f.SketchBytes(); got != 20000 {
		t.Errorf("sketch %d bytes, want 20000", got)
	}
	if got, want := f.SizeBytes(), f.LRU().SizeBytes()+20000; got != want {
		t.Errorf("SizeBytes %d, want %d", got, want)
	}
}
