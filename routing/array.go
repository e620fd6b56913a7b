package routing

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
)

// Result is the answer of a filter array (or IDBFA) query under the
// unique-hit rule (HBA §4.2.1, G-HBA §1): exactly one positive member is a
// hit; zero positives (no member claims the path) and several positives (at
// least one is a false positive, and the array cannot tell which) are
// misses, and the query moves on to the next level.
type Result struct {
	// ID is the positive member when Positives == 1, and "" otherwise.
	ID string
	// Positives is the number of members whose filter answered positive.
	Positives int
}

// Hit reports whether exactly one member was positive.
func (r Result) Hit() bool { return r.Positives == 1 }

// FilterArray stacks the Bloom filters of p members (all of one Geometry) so
// that one query probes all of them at once and applies the unique-hit rule.
//
// Storage is bit-sliced: for each of the M bit positions the array keeps a
// p-bit word (a "slice", padded to 1, 2, 4, 8, 16, 32, 64, 128, 256, 512
// bits and then multiples of 512) whose bit j is that position in the
// filter of slot j. Slices narrower than 64 bits are packed several to a
// word, so a G-HBA segment of a few replicas costs a few bits per position,
// not 64. A query
// hashes the path once, computes its k positions, loads the k slices, ANDs
// them and counts the surviving bits: exactly one is a unique hit. The
// slice of one position lies in one 64-byte cache line (up to 512 members),
// so a query reads k cache lines whatever p is, where probing p separate
// filters reads up to k·p. The k loads do not depend on each other and are
// issued back to back, so on a large array their cache and TLB misses
// overlap and a query costs about one random memory access.
//
// A blocked index (all k positions of a key inside one small block of
// positions, so the k slices share one or two pages) was measured and
// rejected. With 100 members of 1M files each (128 MB of slices) the k
// overlapped loads already cost about one random memory access, and
// blocking saved only 2-7% per query (blocks of 512 or 256 positions; none
// at 10K files, where the array fits in cache), while it raises the
// false-positive rate at 8 bits per file and k=6, measured over 1M absent
// keys, from 2.13% to 2.48% (512), 2.88% (256) or 4.80% (64 positions),
// which cuts the unique-hit rate of present paths among 100 filters,
// (1-f)^99, from 12% to 8% (512) or 5.5% (256). One cache line per query
// would need blocks of 4 positions, at 39%.
// See BenchmarkArrayQueryPaired.
//
// Members are named by string ids mapped to slots; a removed member's slot
// is zeroed and reused by the next Add. A FilterArray is not safe for
// concurrent use; callers serialize access.
type FilterArray struct {
	geo    Geometry
	width  uint64   // bits per position = slots: 1, 2, 4, …, 32, or 64·stride (0: empty)
	stride int      // uint64 words per bit position when width >= 64, else 0
	bits   []uint64 // bit pos·width+s (word >>6, bit &63) = position pos of slot s
	ids    []string // slot -> id ("" when free), plus a final "" (see QueryKey)
	used   []bool   // slot -> occupied; len 64·stride
	vers   []uint64 // slot -> filter version
	slot   map[string]int
}

// NewFilterArray returns an empty array for filters of geometry g. It panics
// if g is invalid; check user-supplied geometries with Validate first.
func NewFilterArray(g Geometry) *FilterArray {
	if err := g.Validate(); err != nil {
		panic(err)
	}
	return &FilterArray{geo: g, slot: make(map[string]int)}
}

// Geometry returns the geometry shared by all members.
func (a *FilterArray) Geometry() Geometry { return a.geo }

// Len returns the number of members.
func (a *FilterArray) Len() int { return len(a.slot) }

// Has reports whether id is a member.
func (a *FilterArray) Has(id string) bool {
	_, ok := a.slot[id]
	return ok
}

// IDs returns the member ids, sorted.
func (a *FilterArray) IDs() []string {
	ids := make([]string, 0, len(a.slot))
	for id := range a.slot {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Version returns the version of member id's filter as last stored by Add,
// Replace, ReplaceEncoded or a delta.
func (a *FilterArray) Version(id string) (uint64, bool) {
	s, ok := a.slot[id]
	if !ok {
		return 0, false
	}
	return a.vers[s], true
}

// SizeBytes is the memory of the bit slices plus the per-slot bookkeeping
// (not counting the id strings).
func (a *FilterArray) SizeBytes() int {
	return len(a.bits)*8 + len(a.used)*(16+1+8)
}

// ArrayBytes returns the memory of the bits of a FilterArray of geometry g
// with n members (each position holds widthFor(n) bits: see the layout
// above), the figure a memory budget for filter replicas is measured in.
func ArrayBytes(g Geometry, n int) int64 {
	if n <= 0 {
		return 0
	}
	return int64(g.M * widthFor(n) / 8)
}

// ArrayMembers returns the largest number of members whose FilterArray of
// geometry g fits in budget bytes (ArrayBytes), at most limit.
func ArrayMembers(g Geometry, budget int64, limit int) int {
	n := 0
	for n < limit && ArrayBytes(g, n+1) <= budget {
		n++
	}
	return n
}

// widthFor returns the bits per position for at least n slots: a power of
// two up to 64, then 64·strideFor(n).
func widthFor(n int) uint64 {
	if n <= 64 {
		w := uint64(1)
		for w < uint64(n) {
			w <<= 1
		}
		return w
	}
	return 64 * uint64(strideFor(n))
}

// strideFor returns the words per position for at least n slots. Strides
// are 1, 2, 4, 8 and then multiples of 8 so that the slice of one position
// never straddles a 64-byte cache line.
func strideFor(n int) int {
	w := (n + 63) / 64
	switch {
	case w <= 1:
		return 1
	case w <= 2:
		return 2
	case w <= 4:
		return 4
	}
	return (w + 7) &^ 7
}

// grow makes room for at least n slots.
func (a *FilterArray) grow(n int) {
	w := widthFor(n)
	if w <= a.width {
		return
	}
	m := a.geo.M
	nb := make([]uint64, (m*w+63)/64)
	if a.width > 0 {
		// Copy every position's slice (the old slots) to its new place.
		for p := uint64(0); p < m; p++ {
			for j := uint64(0); j < a.width; j += 64 {
				v := a.load(p*a.width + j)
				if a.width < 64 {
					v &= 1<<a.width - 1
				}
				d := p*w + j
				nb[d>>6] |= v << (d & 63)
			}
		}
	}
	a.bits, a.width = nb, w
	a.stride = int(w / 64)
	slots := int(w)
	a.used = append(a.used, make([]bool, slots-len(a.used))...)
	a.vers = append(a.vers, make([]uint64, slots-len(a.vers))...)
	ids := make([]string, slots+1)
	copy(ids, a.ids)
	a.ids = ids
}

// load returns the 64 bits starting at bit offset o (o&63 == 0 when the
// width is 64 or more; a narrower slice lies inside one word).
func (a *FilterArray) load(o uint64) uint64 { return a.bits[o>>6] >> (o & 63) }

// setBit sets or clears the bit of slot s at position p.
func (a *FilterArray) setBit(p uint64, s int, v uint64) {
	i := p*a.width + uint64(s)
	a.bits[i>>6] = a.bits[i>>6]&^(1<<(i&63)) | (v&1)<<(i&63)
}

// Add adds member id with a copy of filter f's bits and version. It returns
// ErrDuplicateMember if id is present and ErrGeometryMismatch if f's
// geometry differs from the array's.
func (a *FilterArray) Add(id string, f *Filter) error {
	if _, ok := a.slot[id]; ok {
		return fmt.Errorf("add %q: %w", id, ErrDuplicateMember)
	}
	if f.geo != a.geo {
		return fmt.Errorf("add %q: filter %s into array %s: %w", id, f.geo, a.geo, ErrGeometryMismatch)
	}
	s := slices.Index(a.used, false)
	if s < 0 {
		s = len(a.used)
		a.grow(s + 1)
	}
	a.ids[s], a.used[s], a.vers[s] = id, true, f.version
	a.slot[id] = s
	// A free slot's column is all zeros: only set bits need writing.
	for w, v := range f.words {
		for v != 0 {
			t := bits.TrailingZeros64(v)
			v &= v - 1
			i := uint64(w*64+t)*a.width + uint64(s)
			a.bits[i>>6] |= 1 << (i & 63)
		}
	}
	return nil
}

// Remove deletes member id and frees its slot for reuse.
func (a *FilterArray) Remove(id string) error {
	s, ok := a.slot[id]
	if !ok {
		return fmt.Errorf("remove %q: %w", id, ErrUnknownMember)
	}
	for p := uint64(0); p < a.geo.M; p++ {
		a.setBit(p, s, 0)
	}
	delete(a.slot, id)
	a.ids[s], a.used[s], a.vers[s] = "", false, 0
	return nil
}

// setWord writes the 64 bits of filter word w (positions 64w..64w+63) into
// the column of slot s.
func (a *FilterArray) setWord(s, w int, v uint64) {
	p := uint64(w) * 64
	for t := range uint64(64) {
		a.setBit(p+t, s, v>>t)
	}
}

// Replace overwrites member id's bits and version with filter f's. It
// returns ErrUnknownMember if id is absent and ErrGeometryMismatch if the
// geometries differ.
func (a *FilterArray) Replace(id string, f *Filter) error {
	s, ok := a.slot[id]
	if !ok {
		return fmt.Errorf("replace %q: %w", id, ErrUnknownMember)
	}
	if f.geo != a.geo {
		return fmt.Errorf("replace %q: filter %s into array %s: %w", id, f.geo, a.geo, ErrGeometryMismatch)
	}
	for w, v := range f.words {
		a.setWord(s, w, v)
	}
	a.vers[s] = f.version
	return nil
}

// ReplaceEncoded is Replace with a full filter encoding (Filter.AppendBinary),
// read in place without building a Filter. Bad input returns an error
// wrapping ErrCorrupt and changes nothing.
func (a *FilterArray) ReplaceEncoded(id string, full []byte) error {
	s, ok := a.slot[id]
	if !ok {
		return fmt.Errorf("replace %q: %w", id, ErrUnknownMember)
	}
	g, v, body, err := readHeader(full, magicFull)
	if err != nil {
		return fmt.Errorf("replace %q: %w", id, err)
	}
	if uint64(len(body)) != g.M/8 {
		return fmt.Errorf("replace %q: %d bytes of bits for m=%d: %w", id, len(body), g.M, ErrCorrupt)
	}
	if g != a.geo {
		return fmt.Errorf("replace %q: filter %s into array %s: %w", id, g, a.geo, ErrGeometryMismatch)
	}
	for w := 0; w < g.Words(); w++ {
		a.setWord(s, w, binary.LittleEndian.Uint64(body[w*8:]))
	}
	a.vers[s] = v
	return nil
}

// ApplyDelta applies a delta encoding (Filter.AppendDelta) to member id. The
// delta's base must be the stored version (else ErrVersionMismatch, and the
// caller fetches the full filter); bad input returns ErrCorrupt. On error
// the member is unchanged.
func (a *FilterArray) ApplyDelta(id string, delta []byte) error {
	if !a.Has(id) {
		return fmt.Errorf("delta for %q: %w", id, ErrUnknownMember)
	}
	d, err := DecodeDelta(delta)
	if err != nil {
		return fmt.Errorf("delta for %q: %w", id, err)
	}
	return a.Apply(id, d)
}

// Apply applies a decoded delta to member id; see ApplyDelta.
func (a *FilterArray) Apply(id string, d *Delta) error {
	s, ok := a.slot[id]
	if !ok {
		return fmt.Errorf("delta for %q: %w", id, ErrUnknownMember)
	}
	if d.Geometry != a.geo {
		return fmt.Errorf("delta for %q: %s onto array %s: %w", id, d.Geometry, a.geo, ErrGeometryMismatch)
	}
	if d.Base != a.vers[s] {
		return fmt.Errorf("delta for %q from version %d onto version %d: %w", id, d.Base, a.vers[s], ErrVersionMismatch)
	}
	if len(d.Index) != len(d.Words) {
		return fmt.Errorf("delta for %q: %d indices, %d words: %w", id, len(d.Index), len(d.Words), ErrCorrupt)
	}
	for _, w := range d.Index {
		if w >= uint64(a.geo.Words()) {
			return fmt.Errorf("delta for %q: word %d out of range: %w", id, w, ErrCorrupt)
		}
	}
	for i, w := range d.Index {
		a.setWord(s, int(w), d.Words[i])
	}
	a.vers[s] = d.Next
	return nil
}

// Column reconstructs member id's filter (bits and version; no change
// tracking). It is meant for tests, debugging and migration.
func (a *FilterArray) Column(id string) (*Filter, error) {
	s, ok := a.slot[id]
	if !ok {
		return nil, fmt.Errorf("column %q: %w", id, ErrUnknownMember)
	}
	f := NewFilter(a.geo)
	for w := range f.words {
		var v uint64
		for t := range uint64(64) {
			i := (uint64(w)*64+t)*a.width + uint64(s)
			v |= (a.bits[i>>6] >> (i & 63) & 1) << t
		}
		f.words[w] = v
		f.ones += uint64(bits.OnesCount64(v))
	}
	f.version = a.vers[s]
	return f, nil
}

// Query hashes path with the array's hash kind and applies the unique-hit
// rule; see QueryKey.
func (a *FilterArray) Query(path string) Result {
	return a.QueryKey(HashPath(a.geo.Hash, path))
}

// offsets writes the slice offsets (bit position · width, in bits) of key k into
// dst and returns their number, k. All k offsets are computed before any slice is loaded,
// so the k loads (each usually a cache and TLB miss on a large array) are
// issued back to back and overlap (memory-level parallelism) instead of
// waiting on each other.
func (a *FilterArray) offsets(k Key, dst *[MaxHashes]uint64) int {
	n, m, s := int(a.geo.K), a.geo.M, a.width
	if k.kind == HashXX {
		// Key.index for HashXX, inlined: reduce(h1 + i·h2, m).
		h := k.h1
		for i := 0; i < n; i++ {
			p, _ := bits.Mul64(h, m)
			dst[i] = p * s
			h += k.h2
		}
		return n
	}
	for i := 0; i < n; i++ {
		dst[i] = k.index(uint32(i), m) * s
	}
	return n
}

// QueryKey applies the unique-hit rule to a pre-hashed key, which must have
// the array's hash kind (as for Filter.TestKey): it reports how many members
// are positive and, when exactly one is, which. It does not allocate.
func (a *FilterArray) QueryKey(k Key) Result {
	var count, slot int
	switch {
	case a.width == 0: // never had a member
		return Result{}
	case k.kind == HashXX && a.geo.K <= 8 && a.stride <= 2 && a.stride > 0:
		// The common case, with Key.index inlined. All k offsets are
		// computed first so that the k loads issue back to back.
		var off [8]uint64
		n, m, s := int(a.geo.K), a.geo.M, uint64(a.stride) // word offsets
		h := k.h1
		for i := range off[:n] {
			p, _ := bits.Mul64(h, m) // Key.index for HashXX
			off[i] = p * s
			h += k.h2
		}
		bs := a.bits
		acc0, acc1 := ^uint64(0), uint64(0)
		if s == 1 {
			for _, p := range off[:n] {
				acc0 &= bs[p]
			}
		} else {
			acc1 = ^uint64(0)
			for _, p := range off[:n] {
				w := (*[2]uint64)(bs[p:])
				acc0 &= w[0]
				acc1 &= w[1]
			}
		}
		count = bits.OnesCount64(acc0) + bits.OnesCount64(acc1)
		// The first positive: in acc0, or (tz0 = 64) 64 plus its place
		// in acc1.
		tz0 := bits.TrailingZeros64(acc0)
		slot = tz0 + tz0>>6*bits.TrailingZeros64(acc1)
	default:
		count, slot = a.queryGeneric(k)
	}
	// The unique-hit test is arithmetic, not a branch: a branch on data
	// that arrives from memory this late is often mispredicted, and the
	// flush throws away the next queries' loads already in flight. Unless
	// count is 1, slot moves to the "" that ends ids.
	miss := uint(count^1|-(count^1)) >> 63 // 0 if count == 1, else 1
	slot += int(miss) * (len(a.ids) - 1 - slot)
	return Result{ID: a.ids[slot], Positives: count}
}

// queryGeneric is QueryKey for any hash kind, k and width.
func (a *FilterArray) queryGeneric(k Key) (count, slot int) {
	var off [MaxHashes]uint64
	n := a.offsets(k, &off)
	for j := uint64(0); j < a.width; j += 64 {
		acc := a.sliceAnd(off[:n], j)
		if acc != 0 {
			count += bits.OnesCount64(acc)
			slot = int(j) + bits.TrailingZeros64(acc)
		}
	}
	return count, slot
}

// sliceAnd ANDs the 64 slots from slot j (or all of a narrower slice) at
// the given bit offsets.
func (a *FilterArray) sliceAnd(off []uint64, j uint64) uint64 {
	acc := ^uint64(0)
	for _, p := range off {
		acc &= a.load(p + j)
	}
	if a.width < 64 {
		acc &= 1<<a.width - 1
	}
	return acc
}

// Positives appends to dst the ids of every member whose filter is positive
// for key k (of the array's hash kind), in slot order, and returns the
// extended slice. Unlike QueryKey it names every positive member, for callers
// that want to try them all.
func (a *FilterArray) Positives(k Key, dst []string) []string {
	if len(a.slot) == 0 {
		return dst
	}
	var off [MaxHashes]uint64
	n := a.offsets(k, &off)
	for j := uint64(0); j < a.width; j += 64 {
		acc := a.sliceAnd(off[:n], j)
		for acc != 0 {
			dst = append(dst, a.ids[int(j)+bits.TrailingZeros64(acc)])
			acc &= acc - 1
		}
	}
	return dst
}
