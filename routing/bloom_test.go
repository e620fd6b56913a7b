package routing

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
)

// filterTestPaths returns n distinct paths under prefix, in a fixed
// pseudo-random order (seeded, so tests are reproducible).
func filterTestPaths(prefix string, n int, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("/%s/d%03d/f%d-%08x", prefix, r.IntN(500), i, r.Uint32())
	}
	return out
}

// bloomTheoryFP is the standard false-positive approximation of a Bloom
// filter of m bits and k hash functions holding n elements (HBA §4.2.1):
// (1 − e^{−kn/m})^k. Computed here so the test does not depend on theory.go.
func bloomTheoryFP(m uint64, k uint32, n int) float64 {
	return math.Pow(1-math.Exp(-float64(k)*float64(n)/float64(m)), float64(k))
}

// reseal recomputes the trailing CRC-32C of an encoding, so that a test (or
// a fuzzer) can reach the checks behind the checksum.
func reseal(b []byte) []byte {
	if len(b) < crcLen {
		return b
	}
	c := bytes.Clone(b)
	binary.LittleEndian.PutUint32(c[len(c)-crcLen:], crc32.Checksum(c[:len(c)-crcLen], castagnoli))
	return c
}

func mustGeometry(t testing.TB, capacity int, bits float64, k int, h HashKind) Geometry {
	t.Helper()
	g, err := NewGeometry(capacity, bits, k, h)
	if err != nil {
		t.Fatalf("NewGeometry(%d, %v, %d, %v): %v", capacity, bits, k, h, err)
	}
	return g
}

var hashKinds = []HashKind{HashXX, HashMD5}

func TestNewGeometry(t *testing.T) {
	tests := []struct {
		capacity int
		bits     float64
		k        int
		hash     HashKind
		want     Geometry
		err      error
	}{
		{1000, 8, 0, HashXX, Geometry{M: 8000, K: 6, Hash: HashXX}, nil},
		{1000, 8, 3, HashMD5, Geometry{M: 8000, K: 3, Hash: HashMD5}, nil},
		{1001, 8, 0, HashXX, Geometry{M: 8064, K: 6, Hash: HashXX}, nil},
		{0, 8, 0, HashXX, Geometry{M: 64, K: 6, Hash: HashXX}, nil},
		{1600, 20, 0, HashXX, Geometry{M: 32000, K: 14, Hash: HashXX}, nil},
		{100, 1, 0, HashXX, Geometry{M: 128, K: 1, Hash: HashXX}, nil},
		{100, 0, 0, HashXX, Geometry{}, ErrInvalidGeometry},
		{100, -1, 0, HashXX, Geometry{}, ErrInvalidGeometry},
		{100, math.NaN(), 0, HashXX, Geometry{}, ErrInvalidGeometry},
		{100, math.Inf(1), 0, HashXX, Geometry{}, ErrInvalidGeometry},
		{100, 8, MaxHashes + 1, HashXX, Geometry{}, ErrInvalidGeometry},
		{100, 8, 0, HashKind(0), Geometry{}, ErrInvalidGeometry},
		{100, 8, 0, HashKind(3), Geometry{}, ErrInvalidGeometry},
		{1 << 40, 8, 0, HashXX, Geometry{}, ErrInvalidGeometry},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d/%v/%d/%v", tt.capacity, tt.bits, tt.k, tt.hash), func(t *testing.T) {
			g, err := NewGeometry(tt.capacity, tt.bits, tt.k, tt.hash)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil || g != tt.want {
				t.Fatalf("got %v, %v; want %v", g, err, tt.want)
			}
		})
	}
}

func TestParseHashKind(t *testing.T) {
	tests := []struct {
		in   string
		want HashKind
		ok   bool
	}{
		{"xx", HashXX, true}, {"xxhash", HashXX, true}, {"", HashXX, true},
		{"md5", HashMD5, true}, {"sha1", 0, false}, {"MD5", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseHashKind(tt.in)
		if tt.ok != (err == nil) || got != tt.want {
			t.Errorf("ParseHashKind(%q) = %v, %v", tt.in, got, err)
		}
		if err != nil && !errors.Is(err, ErrInvalidGeometry) {
			t.Errorf("ParseHashKind(%q) error %v does not wrap ErrInvalidGeometry", tt.in, err)
		}
		if err == nil {
			if back, _ := ParseHashKind(got.String()); back != got {
				t.Errorf("%v.String() does not parse back", got)
			}
		}
	}
}

func TestOptimalHashes(t *testing.T) {
	tests := []struct {
		bits float64
		want int
	}{{0.1, 1}, {1, 1}, {4, 3}, {8, 6}, {10, 7}, {16, 11}, {20, 14}, {100, MaxHashes}}
	for _, tt := range tests {
		if got := OptimalHashes(tt.bits); got != tt.want {
			t.Errorf("OptimalHashes(%v) = %d, want %d", tt.bits, got, tt.want)
		}
	}
}

func TestHashBytesMatchesHashPath(t *testing.T) {
	for _, h := range hashKinds {
		for _, p := range append(filterTestPaths("x", 50, 1), "", "/", "/a/rather/long/path/name/well/over/thirty-two/bytes.txt") {
			if a, b := HashPath(h, p), HashBytes(h, []byte(p)); a != b {
				t.Fatalf("%v: HashPath(%q) = %v, HashBytes = %v", h, p, a, b)
			}
		}
	}
}

func TestHashPathAllocs(t *testing.T) {
	p := "/a/rather/long/path/name/well/over/thirty-two/bytes.txt"
	b := []byte(p)
	for _, h := range hashKinds {
		var k Key
		if n := testing.AllocsPerRun(100, func() { k = HashPath(h, p) }); n != 0 {
			t.Errorf("HashPath(%v) allocates %v times", h, n)
		}
		if n := testing.AllocsPerRun(100, func() { k = HashBytes(h, b) }); n != 0 {
			t.Errorf("HashBytes(%v) allocates %v times", h, n)
		}
		_ = k
	}
}

// TestKeyIndexRange checks that every index is inside the filter, for odd
// sizes too.
func TestKeyIndexRange(t *testing.T) {
	for _, h := range hashKinds {
		for _, m := range []uint64{64, 128, 8000, 1 << 20} {
			for _, p := range filterTestPaths("r", 200, 2) {
				k := HashPath(h, p)
				for i := uint32(0); i < MaxHashes; i++ {
					if b := k.index(i, m); b >= m {
						t.Fatalf("%v m=%d: index %d of %q = %d", h, m, i, p, b)
					}
				}
			}
		}
	}
}

func TestFilterNoFalseNegatives(t *testing.T) {
	for _, h := range hashKinds {
		for _, bits := range []float64{1, 4, 8, 20} {
			t.Run(fmt.Sprintf("%v/%v", h, bits), func(t *testing.T) {
				paths := filterTestPaths("nfn", 3000, 3)
				f := NewFilter(mustGeometry(t, len(paths), bits, 0, h))
				for i, p := range paths {
					if i%2 == 0 {
						f.Add(p)
					} else {
						f.AddKey(f.Geometry().Key(p))
					}
				}
				for _, p := range paths {
					if !f.Test(p) || !f.TestKey(HashPath(h, p)) {
						t.Fatalf("false negative for %q", p)
					}
				}
			})
		}
	}
}

// fpPaths returns the present and absent paths of the false-positive
// tests, generated once.
var fpPaths = sync.OnceValues(func() (present, absent []string) {
	return filterTestPaths("in", 20000, 11), filterTestPaths("out", 200000, 12)
})

// TestFilterFalsePositiveRate compares the measured false-positive rate with
// (1 − e^{−kn/m})^k. The tolerance is six binomial standard deviations plus
// 5% of the rate for the spread of the fill ratio between filters and the
// approximation itself; hashes and paths are fixed, so the test is
// deterministic.
func TestFilterFalsePositiveRate(t *testing.T) {
	tests := []struct {
		bits float64
		k    int
	}{{4, 0}, {8, 0}, {8, 3}, {12, 0}, {16, 0}}
	fpPresent, fpAbsent := fpPaths()
	for _, h := range hashKinds {
		for _, tt := range tests {
			g := mustGeometry(t, len(fpPresent), tt.bits, tt.k, h)
			t.Run(fmt.Sprintf("%v/%v/k=%d", h, tt.bits, g.K), func(t *testing.T) {
				f := NewFilter(g)
				for _, p := range fpPresent {
					f.Add(p)
				}
				fp := 0
				for _, p := range fpAbsent {
					if f.Test(p) {
						fp++
					}
				}
				n := float64(len(fpAbsent))
				want := bloomTheoryFP(g.M, g.K, len(fpPresent))
				got := float64(fp) / n
				tol := 6*math.Sqrt(want*(1-want)/n) + 0.05*want
				t.Logf("measured %.5f, theory %.5f, fill^k %.5f, tolerance %.5f", got, want, f.EstimatedFalsePositiveRate(), tol)
				if math.Abs(got-want) > tol {
					t.Errorf("false-positive rate %.5f, theory %.5f ± %.5f", got, want, tol)
				}
				// The fill ratio itself should be close to 1 − e^{−kn/m}.
				wantFill := 1 - math.Exp(-float64(g.K)*float64(len(fpPresent))/float64(g.M))
				if d := math.Abs(f.FillRatio() - wantFill); d > 0.01 {
					t.Errorf("fill ratio %.4f, theory %.4f", f.FillRatio(), wantFill)
				}
			})
		}
	}
}

func TestFilterChangeTracking(t *testing.T) {
	g := mustGeometry(t, 1000, 8, 0, HashXX)
	f := NewFilter(g)
	if f.Version() != 0 || f.ChangedBits() != 0 || f.ChangedWords() != 0 || f.Ones() != 0 {
		t.Fatal("new filter is not clean")
	}
	paths := filterTestPaths("ct", 100, 4)
	for _, p := range paths {
		f.Add(p)
	}
	if f.ChangedBits() != f.Ones() {
		t.Errorf("ChangedBits %d != Ones %d after adds only", f.ChangedBits(), f.Ones())
	}
	words := 0
	f.ForEachWord(func(_ int, w uint64) {
		if w != 0 {
			words++
		}
	})
	if f.ChangedWords() != words {
		t.Errorf("ChangedWords %d, want %d non-zero words", f.ChangedWords(), words)
	}
	if got, want := f.ChangedFraction(), float64(f.Ones())/float64(g.M); got != want {
		t.Errorf("ChangedFraction %v, want %v", got, want)
	}
	f.Mark()
	if f.Version() != 1 || f.ChangedBits() != 0 || f.ChangedWords() != 0 {
		t.Errorf("after Mark: version %d, changed %d/%d", f.Version(), f.ChangedBits(), f.ChangedWords())
	}
	// Re-adding present paths changes nothing.
	for _, p := range paths {
		f.Add(p)
	}
	if f.ChangedBits() != 0 {
		t.Errorf("re-adding changed %d bits", f.ChangedBits())
	}
	ones := f.Ones()
	f.Reset()
	if f.Ones() != 0 || f.ChangedBits() != ones || f.ChangedWords() != words {
		t.Errorf("Reset: ones %d, changed bits %d (want %d), words %d (want %d)", f.Ones(), f.ChangedBits(), ones, f.ChangedWords(), words)
	}
	for _, p := range paths {
		if f.Test(p) {
			t.Fatalf("%q still positive after Reset", p)
		}
	}
}

func TestFilterUnionCloneEqual(t *testing.T) {
	g := mustGeometry(t, 1000, 8, 0, HashXX)
	a, b := NewFilter(g), NewFilter(g)
	pa, pb := filterTestPaths("ua", 300, 5), filterTestPaths("ub", 300, 6)
	for _, p := range pa {
		a.Add(p)
	}
	for _, p := range pb {
		b.Add(p)
	}
	c := a.Clone()
	if !c.Equal(a) || c.Version() != a.Version() {
		t.Fatal("clone differs")
	}
	a.Mark()
	onesBefore := a.Ones()
	if err := a.Union(b); err != nil {
		t.Fatal(err)
	}
	if c.Equal(a) {
		t.Fatal("clone shares storage with the original")
	}
	for _, p := range append(pa, pb...) {
		if !a.Test(p) {
			t.Fatalf("union lost %q", p)
		}
	}
	var ones uint64
	a.ForEachWord(func(i int, w uint64) {
		if w != c.Word(i)|b.Word(i) {
			t.Fatalf("word %d of union is not the OR", i)
		}
		ones += uint64(popcount(w))
	})
	if ones != a.Ones() || a.ChangedBits() != a.Ones()-onesBefore {
		t.Errorf("ones %d (counted %d), changed %d (want %d)", a.Ones(), ones, a.ChangedBits(), a.Ones()-onesBefore)
	}
	other := NewFilter(mustGeometry(t, 1000, 8, 3, HashXX))
	if err := a.Union(other); !errors.Is(err, ErrGeometryMismatch) {
		t.Errorf("union of different geometries: %v", err)
	}
	if a.Equal(other) {
		t.Error("filters of different geometries are Equal")
	}
}

func popcount(w uint64) int {
	n := 0
	for ; w != 0; w &= w - 1 {
		n++
	}
	return n
}

func TestFilterEncodeRoundTrip(t *testing.T) {
	for _, h := range hashKinds {
		for _, n := range []int{0, 1, 500} {
			t.Run(fmt.Sprintf("%v/%d", h, n), func(t *testing.T) {
				f := NewFilter(mustGeometry(t, 500, 8, 0, h))
				for _, p := range filterTestPaths("rt", n, 7) {
					f.Add(p)
				}
				f.Mark()
				f.Mark()
				enc, err := f.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				if want := headerLen + f.SizeBytes() + crcLen; len(enc) != want {
					t.Errorf("encoding is %d bytes, want %d", len(enc), want)
				}
				d, err := DecodeFilter(enc)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Equal(f) || d.Version() != 2 || d.Ones() != f.Ones() || d.ChangedBits() != 0 {
					t.Fatalf("decoded filter differs: version %d ones %d/%d", d.Version(), d.Ones(), f.Ones())
				}
				// AppendBinary appends after existing bytes.
				prefix := []byte("prefix")
				app := f.AppendBinary(bytes.Clone(prefix))
				if !bytes.Equal(app[:len(prefix)], prefix) || !bytes.Equal(app[len(prefix):], enc) {
					t.Error("AppendBinary does not append the encoding")
				}
				// UnmarshalBinary replaces an existing filter of another geometry.
				other := NewFilter(mustGeometry(t, 10, 4, 0, HashXX))
				other.Add("/x")
				if err := other.UnmarshalBinary(enc); err != nil || !other.Equal(f) {
					t.Fatalf("UnmarshalBinary into an existing filter: %v", err)
				}
			})
		}
	}
}

// corruptions returns every single-byte flip and every truncation of enc.
func corruptions(enc []byte) map[string][]byte {
	out := make(map[string][]byte)
	for i := range enc {
		b := bytes.Clone(enc)
		b[i] ^= 0x41
		out[fmt.Sprintf("flip%d", i)] = b
	}
	for n := 0; n < len(enc); n++ {
		out[fmt.Sprintf("trunc%d", n)] = bytes.Clone(enc[:n])
	}
	out["extra"] = append(bytes.Clone(enc), 0)
	return out
}

// headerCorruptions returns encodings with a valid checksum but a bad
// header: wrong magic, format version, reserved byte or geometry.
func headerCorruptions(enc []byte) map[string][]byte {
	set := func(i int, v byte) []byte {
		b := bytes.Clone(enc)
		b[i] = v
		return reseal(b)
	}
	m := func(v uint64) []byte {
		b := bytes.Clone(enc)
		binary.LittleEndian.PutUint64(b[8:], v)
		return reseal(b)
	}
	return map[string][]byte{
		"magic":    set(0, 'X'),
		"format":   set(4, formatVersion+1),
		"hash0":    set(5, 0),
		"hash9":    set(5, 9),
		"k0":       set(6, 0),
		"k33":      set(6, MaxHashes+1),
		"reserved": set(7, 1),
		"m0":       m(0),
		"m100":     m(100),
		"mHuge":    m(1 << 40),
		"mTooBig":  m(1<<40 + 64),
		"mSmaller": m(64),
		"mLarger":  m(1 << 20),
		"resealed": reseal(enc[:len(enc)-9]),
	}
}

func TestFilterDecodeCorrupt(t *testing.T) {
	f := NewFilter(Geometry{M: 256, K: 3, Hash: HashXX})
	for _, p := range filterTestPaths("c", 20, 8) {
		f.Add(p)
	}
	enc := f.AppendBinary(nil)
	cases := corruptions(enc)
	for name, b := range headerCorruptions(enc) {
		cases["hdr-"+name] = b
	}
	for name, b := range cases {
		if _, err := DecodeFilter(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
	// A failed UnmarshalBinary leaves the filter unchanged.
	g := f.Clone()
	if err := g.UnmarshalBinary(enc[:10]); err == nil || !g.Equal(f) {
		t.Error("failed UnmarshalBinary changed the filter")
	}
	// A delta is not a full filter, and vice versa.
	if _, err := DecodeFilter(f.AppendDelta(nil)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("delta decoded as a filter: %v", err)
	}
	if _, err := DecodeDelta(enc); !errors.Is(err, ErrCorrupt) {
		t.Errorf("filter decoded as a delta: %v", err)
	}
}

// TestDeltaReproducesFilter runs an owner through rounds of changes and a
// replica through the deltas: after every round the replica equals the
// owner, at the same version.
func TestDeltaReproducesFilter(t *testing.T) {
	for _, h := range hashKinds {
		t.Run(h.String(), func(t *testing.T) {
			g := mustGeometry(t, 2000, 8, 0, h)
			owner := NewFilter(g)
			for _, p := range filterTestPaths("base", 200, 9) {
				owner.Add(p)
			}
			// The owner starts a version, then ships it in full.
			owner.Mark()
			replica, err := DecodeFilter(owner.AppendBinary(nil))
			if err != nil {
				t.Fatal(err)
			}
			paths := filterTestPaths("delta", 200, 10)
			for round := 0; round < 10; round++ {
				// Round 3 changes nothing: an empty delta still advances the version.
				if round != 3 {
					for _, p := range paths[round*20 : round*20+20] {
						owner.Add(p)
					}
				}
				if round == 7 {
					owner.Reset()
				}
				changed := owner.ChangedWords()
				delta := owner.MarkDelta(nil)
				full := headerLen + owner.SizeBytes() + crcLen
				if round < 7 && len(delta) >= full {
					t.Errorf("round %d: delta of %d words is %d bytes, full is %d", round, changed, len(delta), full)
				}
				d, err := DecodeDelta(delta)
				if err != nil {
					t.Fatal(err)
				}
				if len(d.Index) != changed || d.Base != uint64(round+1) || d.Next != uint64(round+2) {
					t.Fatalf("round %d: delta has %d words (want %d), %d→%d", round, len(d.Index), changed, d.Base, d.Next)
				}
				if err := replica.ApplyDelta(delta); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if !replica.Equal(owner) || replica.Version() != owner.Version() || replica.Ones() != owner.Ones() {
					t.Fatalf("round %d: replica differs (version %d/%d, ones %d/%d)", round, replica.Version(), owner.Version(), replica.Ones(), owner.Ones())
				}
			}
		})
	}
}

func TestDeltaErrors(t *testing.T) {
	g := mustGeometry(t, 1000, 8, 0, HashXX)
	owner := NewFilter(g)
	replica := NewFilter(g)
	for _, p := range filterTestPaths("e", 100, 13) {
		owner.Add(p)
	}
	first := owner.MarkDelta(nil) // 0 → 1
	owner.Add("/one/more")
	second := owner.MarkDelta(nil) // 1 → 2

	// Skipping a delta: the base does not match.
	before := replica.Clone()
	if err := replica.ApplyDelta(second); !errors.Is(err, ErrVersionMismatch) {
		t.Fatalf("wrong base: %v", err)
	}
	if !replica.Equal(before) || replica.Version() != 0 {
		t.Fatal("a refused delta changed the replica")
	}
	if err := replica.ApplyDelta(first); err != nil {
		t.Fatal(err)
	}
	// Replaying a delta: the base does not match either.
	if err := replica.ApplyDelta(first); !errors.Is(err, ErrVersionMismatch) {
		t.Fatalf("replayed delta: %v", err)
	}
	if err := replica.ApplyDelta(second); err != nil || !replica.Equal(owner) {
		t.Fatalf("second delta: %v", err)
	}

	// Other geometries: size, k and hash kind.
	for _, og := range []Geometry{
		{M: g.M * 2, K: g.K, Hash: g.Hash},
		{M: g.M, K: g.K + 1, Hash: g.Hash},
		{M: g.M, K: g.K, Hash: HashMD5},
	} {
		o := NewFilter(og)
		if err := o.ApplyDelta(first); !errors.Is(err, ErrGeometryMismatch) {
			t.Errorf("delta onto %v: %v", og, err)
		}
		if o.Ones() != 0 || o.Version() != 0 {
			t.Errorf("refused delta changed a %v filter", og)
		}
	}

	// Corrupt deltas.
	for name, b := range corruptions(second) {
		r := NewFilter(g)
		if err := r.ApplyDelta(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
	for name, b := range headerCorruptions(second) {
		if name == "mHuge" || name == "mLarger" {
			continue // a valid delta for a larger filter
		}
		if _, err := DecodeDelta(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("hdr-%s: err = %v, want ErrCorrupt", name, err)
		}
	}
}

// TestDeltaBodyCorrupt builds delta bodies by hand, with valid checksums.
func TestDeltaBodyCorrupt(t *testing.T) {
	g := Geometry{M: 256, K: 3, Hash: HashXX} // 4 words
	build := func(next uint64, tail ...byte) []byte {
		b := putHeader(nil, magicDelta, g, 5)
		b = binary.LittleEndian.AppendUint64(b, next)
		b = append(b, tail...)
		return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	}
	word := make([]byte, 8)
	entry := func(gap byte) []byte { return append([]byte{gap}, word...) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := map[string][]byte{
		"noNext":        reseal(append(putHeader(nil, magicDelta, g, 5), 0, 0, 0, 0)),
		"noCount":       build(6),
		"badVarint":     build(6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
		"countTooBig":   build(6, cat([]byte{5}, entry(0), entry(0), entry(0), entry(0), entry(0))...),
		"countVsBytes":  build(6, cat([]byte{2}, entry(0))...),
		"indexRange":    build(6, cat([]byte{1}, entry(4))...),
		"indexOverflow": build(6, cat([]byte{2}, entry(1), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, word)...),
		"truncEntry":    build(6, 1, 0, 1, 2, 3),
		"trailing":      build(6, cat([]byte{1}, entry(0), []byte{0})...),
	}
	for name, b := range tests {
		if _, err := DecodeDelta(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
	// And the well-formed ones decode.
	d, err := DecodeDelta(build(6, cat([]byte{2}, entry(1), entry(1))...))
	if err != nil || len(d.Index) != 2 || d.Index[0] != 1 || d.Index[1] != 3 || d.Base != 5 || d.Next != 6 {
		t.Fatalf("valid delta: %+v, %v", d, err)
	}
}
