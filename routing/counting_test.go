package routing

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// recount returns, for every position, how many hash functions of the
// present multiset map there: the counters a counting filter without
// saturation would hold.
func recount(g Geometry, present map[string]int) []int {
	n := make([]int, g.M)
	for p, c := range present {
		k := HashPath(g.Hash, p)
		for i := uint32(0); i < g.K; i++ {
			n[k.index(i, g.M)] += c
		}
	}
	return n
}

// checkCounting verifies the view against the counters, that no present key
// is a false negative and that no counter is below its recount. When no
// counter is saturated (and so none ever was: saturated counters stick) the
// counters must equal the recount and the view a plain filter built from
// the present set.
func checkCounting(t *testing.T, c *CountingFilter, present map[string]int) {
	t.Helper()
	g := c.Geometry()
	var ones uint64
	for b := uint64(0); b < g.M; b++ {
		set := c.view.words[b>>6]&(1<<(b&63)) != 0
		if set != (c.counter(b) != 0) {
			t.Fatalf("view bit %d = %v, counter %d", b, set, c.counter(b))
		}
		if set {
			ones++
		}
	}
	if ones != c.view.Ones() {
		t.Fatalf("view Ones %d, counted %d", c.view.Ones(), ones)
	}
	for p := range present {
		if !c.Test(p) {
			t.Fatalf("false negative for %q", p)
		}
	}
	want := recount(g, present)
	for b, n := range want {
		if got := c.counter(uint64(b)); got < uint64(min(n, counterMax)) {
			t.Fatalf("counter %d = %d below %d", b, got, n)
		}
	}
	if c.Saturated() > 0 {
		return
	}
	for b, n := range want {
		if got := c.counter(uint64(b)); got != uint64(n) {
			t.Fatalf("counter %d = %d, want %d", b, got, n)
		}
	}
	plain := NewFilter(g)
	for p := range present {
		plain.Add(p)
	}
	if !plain.Equal(c.Filter()) {
		t.Fatal("view differs from a plain filter of the present set")
	}
}

func TestCountingAddRemove(t *testing.T) {
	for _, h := range hashKinds {
		t.Run(h.String(), func(t *testing.T) {
			c := NewCountingFilter(mustGeometry(t, 1000, 8, 0, h))
			paths := filterTestPaths("ar", 1000, 20)
			present := map[string]int{}
			for _, p := range paths {
				c.Add(p)
				present[p]++
			}
			checkCounting(t, c, present)
			for _, p := range paths[:500] {
				if !c.Remove(p) {
					t.Fatalf("Remove(%q) = false", p)
				}
				delete(present, p)
			}
			checkCounting(t, c, present)
			for _, p := range paths[500:] {
				if !c.RemoveKey(HashPath(h, p)) {
					t.Fatalf("RemoveKey(%q) = false", p)
				}
			}
			if c.Filter().Ones() != 0 {
				t.Fatalf("%d bits left after removing everything", c.Filter().Ones())
			}
			for _, w := range c.counters {
				if w != 0 {
					t.Fatal("counters left after removing everything")
				}
			}
		})
	}
}

// TestCountingRandomOps drives add/remove sequences of present keys,
// including repeated adds, and checks for false negatives and exact counts.
// The small geometries make hash functions of one key collide on a counter
// and drive counters into saturation.
func TestCountingRandomOps(t *testing.T) {
	tests := []struct {
		g    Geometry
		keys int
		ops  int
	}{
		{Geometry{M: 64, K: 8, Hash: HashXX}, 20, 3000},
		{Geometry{M: 128, K: 4, Hash: HashMD5}, 30, 3000},
		{Geometry{M: 4096, K: 6, Hash: HashXX}, 400, 6000},
		{Geometry{M: 4096, K: 6, Hash: HashMD5}, 400, 6000},
	}
	for _, tt := range tests {
		t.Run(tt.g.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(21, uint64(tt.g.M)))
			keys := filterTestPaths("rnd", tt.keys, 22)
			c := NewCountingFilter(tt.g)
			present := map[string]int{}
			var live []string // one entry per present instance
			// An exact model of the saturating counters.
			model := make([]int, tt.g.M)
			stuck := make([]bool, tt.g.M)
			step := func(p string, d int) {
				k := HashPath(tt.g.Hash, p)
				for i := uint32(0); i < tt.g.K; i++ {
					if b := k.index(i, tt.g.M); !stuck[b] {
						model[b] += d
						stuck[b] = model[b] == counterMax
					}
				}
			}
			for op := 0; op < tt.ops; op++ {
				if len(live) == 0 || r.IntN(100) < 55 {
					p := keys[r.IntN(len(keys))]
					c.Add(p)
					step(p, 1)
					present[p]++
					live = append(live, p)
				} else {
					i := r.IntN(len(live))
					p := live[i]
					live[i] = live[len(live)-1]
					live = live[:len(live)-1]
					if !c.Remove(p) {
						t.Fatalf("op %d: Remove of present %q refused", op, p)
					}
					step(p, -1)
					if present[p]--; present[p] == 0 {
						delete(present, p)
					}
				}
				if tt.g.M > 128 && op%25 != 0 {
					continue
				}
				for b, n := range model {
					want := uint64(n)
					if stuck[b] {
						want = counterMax
					}
					if got := c.counter(uint64(b)); got != want {
						t.Fatalf("op %d: counter %d = %d, model %d", op, b, got, want)
					}
				}
				if op%50 == 0 {
					checkCounting(t, c, present)
				}
			}
			checkCounting(t, c, present)
			t.Logf("%d saturated counters", c.Saturated())
		})
	}
}

func TestCountingRemoveAbsent(t *testing.T) {
	c := NewCountingFilter(mustGeometry(t, 1000, 8, 0, HashXX))
	// An empty filter refuses every removal and nothing underflows.
	for _, p := range filterTestPaths("abs", 100, 23) {
		if c.Remove(p) {
			t.Fatalf("Remove(%q) on an empty filter = true", p)
		}
	}
	if c.Filter().ChangedBits() != 0 || c.Filter().Ones() != 0 {
		t.Fatal("refused removals changed the filter")
	}
	for _, w := range c.counters {
		if w != 0 {
			t.Fatal("refused removals changed the counters")
		}
	}
	// A filter holding other keys: refused removals change nothing.
	present := map[string]int{}
	for _, p := range filterTestPaths("pres", 500, 24) {
		c.Add(p)
		present[p]++
	}
	before := c.AppendBinary(nil)
	refused := 0
	for _, p := range filterTestPaths("abs", 1000, 23) {
		if c.Test(p) {
			continue // a false positive: its removal would be accepted
		}
		if c.Remove(p) {
			t.Fatalf("Remove(%q), which tests negative, = true", p)
		}
		refused++
	}
	if !bytes.Equal(before, c.AppendBinary(nil)) {
		t.Fatal("refused removals changed the filter")
	}
	if refused < 900 {
		t.Fatalf("only %d of 1000 absent keys test negative", refused)
	}
	checkCounting(t, c, present)
}

// TestCountingSharedCounter covers a key two of whose hash functions pick
// the same counter: it adds 2 there, so a second removal must be refused
// instead of underflowing.
func TestCountingSharedCounter(t *testing.T) {
	g := Geometry{M: 64, K: 8, Hash: HashXX}
	var key string
	for i := 0; key == ""; i++ {
		p := fmt.Sprintf("/dup/%d", i)
		k := HashPath(g.Hash, p)
		seen := map[uint64]bool{}
		for j := uint32(0); j < g.K; j++ {
			seen[k.index(j, g.M)] = true
		}
		if len(seen) < int(g.K) {
			key = p
		}
	}
	c := NewCountingFilter(g)
	c.Add(key)
	checkCounting(t, c, map[string]int{key: 1})
	if !c.Remove(key) {
		t.Fatal("first Remove refused")
	}
	if c.Remove(key) {
		t.Fatal("second Remove accepted")
	}
	if c.Filter().Ones() != 0 {
		t.Fatal("bits left")
	}
	for _, w := range c.counters {
		if w != 0 {
			t.Fatalf("counters underflowed: %016x", w)
		}
	}
}

func TestCountingSaturation(t *testing.T) {
	g := mustGeometry(t, 1000, 8, 0, HashXX)
	c := NewCountingFilter(g)
	const p = "/hot/file"
	for i := 0; i < 20; i++ {
		c.Add(p)
	}
	if got := c.Saturated(); got != int(g.K) {
		t.Fatalf("Saturated = %d, want %d", got, g.K)
	}
	// Saturated counters never decrement: the key stays, with no false
	// negative however often it is removed.
	for i := 0; i < 30; i++ {
		if !c.Remove(p) {
			t.Fatalf("Remove %d refused", i)
		}
	}
	if !c.Test(p) || c.Saturated() != int(g.K) || c.Filter().Ones() != uint64(g.K) {
		t.Fatal("saturated counters changed")
	}
}

// TestCountingViewDelta replicates the plain view of a counting filter
// through deltas while keys are added and removed.
func TestCountingViewDelta(t *testing.T) {
	for _, h := range hashKinds {
		t.Run(h.String(), func(t *testing.T) {
			c := NewCountingFilter(mustGeometry(t, 2000, 8, 0, h))
			if c.Filter() != c.Filter() {
				t.Fatal("Filter returns different objects")
			}
			paths := filterTestPaths("vd", 1500, 25)
			for _, p := range paths[:1000] {
				c.Add(p)
			}
			c.Filter().Mark()
			replica, err := DecodeFilter(c.Filter().AppendBinary(nil))
			if err != nil {
				t.Fatal(err)
			}
			for round := 0; round < 10; round++ {
				for _, p := range paths[round*100 : round*100+50] {
					c.Remove(p)
				}
				for _, p := range paths[1000+round*50 : 1000+round*50+50] {
					c.Add(p)
				}
				if c.Filter().ChangedBits() == 0 {
					t.Fatalf("round %d: no changed bits", round)
				}
				if err := replica.ApplyDelta(c.Filter().MarkDelta(nil)); err != nil {
					t.Fatal(err)
				}
				if !replica.Equal(c.Filter()) || replica.Version() != c.Filter().Version() {
					t.Fatalf("round %d: replica differs", round)
				}
			}
		})
	}
}

func TestCountingEncodeRoundTrip(t *testing.T) {
	for _, h := range hashKinds {
		t.Run(h.String(), func(t *testing.T) {
			g := mustGeometry(t, 300, 8, 0, h)
			c := NewCountingFilter(g)
			present := map[string]int{}
			for _, p := range filterTestPaths("enc", 300, 26) {
				c.Add(p)
				present[p]++
			}
			for i := 0; i < 20; i++ { // saturate a few counters
				c.Add("/hot")
			}
			present["/hot"] = 20
			c.Filter().Mark()
			c.Filter().Mark()
			enc, err := c.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if want := headerLen + int(g.M/2) + crcLen; len(enc) != want {
				t.Errorf("encoding is %d bytes, want %d", len(enc), want)
			}
			d, err := DecodeCountingFilter(enc)
			if err != nil {
				t.Fatal(err)
			}
			checkCounting(t, d, present)
			if !d.Filter().Equal(c.Filter()) || d.Filter().Version() != 2 || d.Saturated() != c.Saturated() {
				t.Fatal("decoded filter differs")
			}
			if !bytes.Equal(d.AppendBinary(nil), enc) {
				t.Fatal("re-encoding differs")
			}
			// Unmarshal into an existing filter keeps its view object.
			e := NewCountingFilter(Geometry{M: 64, K: 1, Hash: HashXX})
			view := e.Filter()
			if err := e.UnmarshalBinary(enc); err != nil {
				t.Fatal(err)
			}
			if e.Filter() != view || !view.Equal(c.Filter()) || view.Version() != 2 {
				t.Fatal("UnmarshalBinary replaced or did not update the view")
			}
			// Clone is deep.
			cl := c.Clone()
			cl.Remove("/hot")
			cl.Remove(filterTestPaths("enc", 1, 26)[0])
			if !bytes.Equal(c.AppendBinary(nil), enc) {
				t.Fatal("Clone shares storage")
			}
		})
	}
}

func TestCountingDecodeCorrupt(t *testing.T) {
	c := NewCountingFilter(Geometry{M: 128, K: 3, Hash: HashXX})
	for _, p := range filterTestPaths("cc", 10, 27) {
		c.Add(p)
	}
	enc := c.AppendBinary(nil)
	cases := corruptions(enc)
	for name, b := range headerCorruptions(enc) {
		cases["hdr-"+name] = b
	}
	f := NewFilter(c.Geometry())
	cases["plainFilter"] = f.AppendBinary(nil)
	for name, b := range cases {
		if _, err := DecodeCountingFilter(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
	// A counting filter is not a plain filter either.
	if _, err := DecodeFilter(enc); !errors.Is(err, ErrCorrupt) {
		t.Errorf("counting filter decoded as a plain filter: %v", err)
	}
	// A failed UnmarshalBinary leaves the filter unchanged.
	if err := c.UnmarshalBinary(enc[:20]); err == nil || !bytes.Equal(c.AppendBinary(nil), enc) {
		t.Fatal("failed UnmarshalBinary changed the filter")
	}
}

func TestCountingSizeBytes(t *testing.T) {
	for _, bits := range []float64{8, 20} {
		g := mustGeometry(t, 10000, bits, 0, HashXX)
		c := NewCountingFilter(g)
		perElem := float64(c.SizeBytes()) / 10000
		if want := bits * 5 / 8; perElem != want {
			t.Errorf("%v bits/element: %.3f bytes/element, want %.3f", bits, perElem, want)
		}
		t.Logf("%v bits/element: counting filter %.3f bytes/element (plain filter %.3f)", bits, perElem, float64(c.Filter().SizeBytes())/10000)
	}
}

func TestCountingAllocs(t *testing.T) {
	c := NewCountingFilter(mustGeometry(t, 1000, 8, 0, HashXX))
	paths := filterTestPaths("al", 100, 28)
	i := 0
	n := testing.AllocsPerRun(1000, func() {
		p := paths[i%len(paths)]
		c.Add(p)
		c.Test(p)
		c.Remove(p)
		i++
	})
	if n != 0 {
		t.Errorf("Add/Test/Remove allocate %v times", n)
	}
}
