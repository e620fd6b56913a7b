package routing

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
)

// Geometry is the shape of a Bloom filter: M bits, K hash functions and the
// hash kind. Filters can only be compared, merged or stacked into an array
// when their geometries are equal.
type Geometry struct {
	M    uint64   // number of bits, a positive multiple of 64
	K    uint32   // number of hash functions, 1..MaxHashes
	Hash HashKind // how paths become indices
}

// maxBits bounds M (2^40 bits = 128 GiB) so that a decoded header can never
// ask for an absurd allocation.
const maxBits = 1 << 40

// NewGeometry sizes a filter for capacity elements at bitsPerElement bits
// each. k = 0 picks the optimum for that ratio (OptimalHashes). M is rounded
// up to a multiple of 64.
func NewGeometry(capacity int, bitsPerElement float64, k int, hash HashKind) (Geometry, error) {
	if capacity < 1 {
		capacity = 1
	}
	if !(bitsPerElement > 0) || math.IsInf(bitsPerElement, 0) {
		return Geometry{}, fmt.Errorf("bits per element %v: %w", bitsPerElement, ErrInvalidGeometry)
	}
	if k == 0 {
		k = OptimalHashes(bitsPerElement)
	}
	m := uint64(math.Ceil(float64(capacity) * bitsPerElement))
	m = (m + 63) &^ 63
	g := Geometry{M: m, K: uint32(k), Hash: hash}
	return g, g.Validate()
}

// Validate reports whether g can back a filter.
func (g Geometry) Validate() error {
	switch {
	case g.M == 0 || g.M%64 != 0 || g.M > maxBits:
		return fmt.Errorf("m=%d bits (want a positive multiple of 64 up to 2^40): %w", g.M, ErrInvalidGeometry)
	case g.K < 1 || g.K > MaxHashes:
		return fmt.Errorf("k=%d (want 1..%d): %w", g.K, MaxHashes, ErrInvalidGeometry)
	case !g.Hash.valid():
		return fmt.Errorf("hash kind %d: %w", g.Hash, ErrInvalidGeometry)
	}
	return nil
}

// Words is the number of 64-bit words of a filter with this geometry.
func (g Geometry) Words() int { return int(g.M / 64) }

// Key hashes path with this geometry's hash kind.
func (g Geometry) Key(path string) Key { return HashPath(g.Hash, path) }

// String renders the geometry for logs and errors.
func (g Geometry) String() string {
	return fmt.Sprintf("m=%d k=%d hash=%s", g.M, g.K, g.Hash)
}

// Filter is a standard Bloom filter with change tracking.
//
// Change tracking serves replica propagation (HBA §6, "propagation
// threshold"): the filter counts the bit flips since the last Mark and
// remembers which words changed, so the owner can push just those words
// (a delta) once the changed share of bits passes a threshold.
//
// A Filter is not safe for concurrent use; callers serialize access.
type Filter struct {
	geo     Geometry
	words   []uint64
	ones    uint64   // set bits
	version uint64   // version at the last Mark (or as decoded)
	flips   uint64   // bit flips since the last Mark
	dirty   []uint64 // one bit per word: changed since the last Mark
	ndirty  int      // set bits in dirty
}

// NewFilter returns an empty filter. It panics if g is invalid; check
// user-supplied geometries with Validate first.
func NewFilter(g Geometry) *Filter {
	if err := g.Validate(); err != nil {
		panic(err)
	}
	n := g.Words()
	return &Filter{geo: g, words: make([]uint64, n), dirty: make([]uint64, (n+63)/64)}
}

// Geometry returns the filter's geometry.
func (f *Filter) Geometry() Geometry { return f.geo }

// Add inserts path.
func (f *Filter) Add(path string) { f.AddKey(HashPath(f.geo.Hash, path)) }

// AddKey inserts a pre-hashed key. The key must have the filter's hash kind.
func (f *Filter) AddKey(k Key) {
	for i := uint32(0); i < f.geo.K; i++ {
		f.setBit(k.index(i, f.geo.M))
	}
}

// Test reports whether path may be in the set (no false negatives).
func (f *Filter) Test(path string) bool { return f.TestKey(HashPath(f.geo.Hash, path)) }

// TestKey is Test for a pre-hashed key.
func (f *Filter) TestKey(k Key) bool {
	for i := uint32(0); i < f.geo.K; i++ {
		b := k.index(i, f.geo.M)
		if f.words[b>>6]&(1<<(b&63)) == 0 {
			return false
		}
	}
	return true
}

// setBit sets bit b and reports whether it changed.
func (f *Filter) setBit(b uint64) bool {
	w, m := b>>6, uint64(1)<<(b&63)
	if f.words[w]&m != 0 {
		return false
	}
	f.words[w] |= m
	f.ones++
	f.touch(w)
	return true
}

// clearBit clears bit b and reports whether it changed.
func (f *Filter) clearBit(b uint64) bool {
	w, m := b>>6, uint64(1)<<(b&63)
	if f.words[w]&m == 0 {
		return false
	}
	f.words[w] &^= m
	f.ones--
	f.touch(w)
	return true
}

func (f *Filter) touch(w uint64) {
	f.flips++
	d, m := w>>6, uint64(1)<<(w&63)
	if f.dirty[d]&m == 0 {
		f.dirty[d] |= m
		f.ndirty++
	}
}

// Ones returns the number of set bits.
func (f *Filter) Ones() uint64 { return f.ones }

// FillRatio returns the share of set bits.
func (f *Filter) FillRatio() float64 { return float64(f.ones) / float64(f.geo.M) }

// EstimatedFalsePositiveRate is FillRatio^k, the probability that an absent
// key finds all its k bits set.
func (f *Filter) EstimatedFalsePositiveRate() float64 {
	return math.Pow(f.FillRatio(), float64(f.geo.K))
}

// Version returns the version of the filter: the number of Marks since it
// was created, or the version it was decoded with.
func (f *Filter) Version() uint64 { return f.version }

// ChangedBits returns the number of bit flips since the last Mark (an upper
// bound on the bits that differ from the marked state).
func (f *Filter) ChangedBits() uint64 { return f.flips }

// ChangedFraction returns ChangedBits as a share of M; HBA propagates a
// filter when this passes the threshold (1% by default).
func (f *Filter) ChangedFraction() float64 { return float64(f.flips) / float64(f.geo.M) }

// ChangedWords returns the number of 64-bit words changed since the last Mark.
func (f *Filter) ChangedWords() int { return f.ndirty }

// Mark starts a new version: it forgets the changes recorded so far and
// increments the version. Call it after the current state has been sent to
// the replicas (see MarkDelta).
func (f *Filter) Mark() {
	clear(f.dirty)
	f.ndirty = 0
	f.flips = 0
	f.version++
}

// Reset clears every bit; the change tracking records the cleared words.
func (f *Filter) Reset() {
	for w, v := range f.words {
		if v != 0 {
			f.words[w] = 0
			f.flips += uint64(bits.OnesCount64(v))
			f.touch(uint64(w))
			f.flips-- // touch counted one flip for the word
		}
	}
	f.ones = 0
}

// Clone returns a deep copy, including version and change tracking.
func (f *Filter) Clone() *Filter {
	c := *f
	c.words = append([]uint64(nil), f.words...)
	c.dirty = append([]uint64(nil), f.dirty...)
	return &c
}

// Equal reports whether two filters have the same geometry and bits
// (versions and change tracking are ignored).
func (f *Filter) Equal(o *Filter) bool {
	if f.geo != o.geo {
		return false
	}
	for i, w := range f.words {
		if o.words[i] != w {
			return false
		}
	}
	return true
}

// Word returns the i-th 64-bit word of the bit vector (bits 64i..64i+63).
func (f *Filter) Word(i int) uint64 { return f.words[i] }

// ForEachWord calls fn for every word, in order.
func (f *Filter) ForEachWord(fn func(i int, w uint64)) {
	for i, w := range f.words {
		fn(i, w)
	}
}

// Union ORs o into f. The geometries must match.
func (f *Filter) Union(o *Filter) error {
	if f.geo != o.geo {
		return fmt.Errorf("union %s with %s: %w", f.geo, o.geo, ErrGeometryMismatch)
	}
	for i, w := range o.words {
		if add := w &^ f.words[i]; add != 0 {
			f.words[i] |= add
			n := uint64(bits.OnesCount64(add))
			f.ones += n
			f.touch(uint64(i))
			f.flips += n - 1
		}
	}
	return nil
}

// SizeBytes is the memory of the bit vector.
func (f *Filter) SizeBytes() int { return len(f.words) * 8 }

// ---- binary encodings ----

// Encoding layout (all integers little-endian):
//
//	full:  "GHBF" | format u8 | hash u8 | k u8 | 0 u8 | m u64 | version u64 | words [m/64]u64 | crc32c u32
//	delta: "GHBD" | format u8 | hash u8 | k u8 | 0 u8 | m u64 | base u64 | next u64 |
//	       count uvarint | count × (index gap uvarint, word u64) | crc32c u32
//
// The CRC (Castagnoli) covers every byte before it. The index gap is the
// word index minus the previous index minus one (the first is the index).
const (
	formatVersion = 1
	headerLen     = 4 + 4 + 8 + 8
	crcLen        = 4
)

var (
	magicFull  = [4]byte{'G', 'H', 'B', 'F'}
	magicDelta = [4]byte{'G', 'H', 'B', 'D'}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

func putHeader(dst []byte, magic [4]byte, g Geometry, v uint64) []byte {
	dst = append(dst, magic[:]...)
	dst = append(dst, formatVersion, byte(g.Hash), byte(g.K), 0)
	dst = binary.LittleEndian.AppendUint64(dst, g.M)
	return binary.LittleEndian.AppendUint64(dst, v)
}

// readHeader checks magic, format and CRC and returns the geometry, the
// first version field and the body between the header and the CRC.
func readHeader(b []byte, magic [4]byte) (Geometry, uint64, []byte, error) {
	if len(b) < headerLen+crcLen {
		return Geometry{}, 0, nil, fmt.Errorf("%d bytes is too short: %w", len(b), ErrCorrupt)
	}
	if [4]byte(b[:4]) != magic {
		return Geometry{}, 0, nil, fmt.Errorf("bad magic %q: %w", b[:4], ErrCorrupt)
	}
	if b[4] != formatVersion {
		return Geometry{}, 0, nil, fmt.Errorf("format version %d: %w", b[4], ErrCorrupt)
	}
	if b[7] != 0 {
		return Geometry{}, 0, nil, fmt.Errorf("reserved header byte %d: %w", b[7], ErrCorrupt)
	}
	body := b[:len(b)-crcLen]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(b[len(b)-crcLen:]); got != want {
		return Geometry{}, 0, nil, fmt.Errorf("checksum %08x, want %08x: %w", got, want, ErrCorrupt)
	}
	g := Geometry{Hash: HashKind(b[5]), K: uint32(b[6]), M: binary.LittleEndian.Uint64(b[8:16])}
	if err := g.Validate(); err != nil {
		return Geometry{}, 0, nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return g, binary.LittleEndian.Uint64(b[16:24]), body[headerLen:], nil
}

// AppendBinary appends the full encoding of f (geometry, version, bits,
// checksum) to dst.
func (f *Filter) AppendBinary(dst []byte) []byte {
	start := len(dst)
	dst = putHeader(dst, magicFull, f.geo, f.version)
	for _, w := range f.words {
		dst = binary.LittleEndian.AppendUint64(dst, w)
	}
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// MarshalBinary implements encoding.BinaryMarshaler.
func (f *Filter) MarshalBinary() ([]byte, error) {
	return f.AppendBinary(make([]byte, 0, headerLen+f.SizeBytes()+crcLen)), nil
}

// UnmarshalBinary implements encoding.BinaryUnmarshaler: it replaces f with
// the decoded filter. Bad input returns an error wrapping ErrCorrupt.
func (f *Filter) UnmarshalBinary(b []byte) error {
	g, v, body, err := readHeader(b, magicFull)
	if err != nil {
		return err
	}
	if uint64(len(body)) != g.M/8 {
		return fmt.Errorf("%d bytes of bits for m=%d: %w", len(body), g.M, ErrCorrupt)
	}
	nf := NewFilter(g)
	for i := range nf.words {
		w := binary.LittleEndian.Uint64(body[i*8:])
		nf.words[i] = w
		nf.ones += uint64(bits.OnesCount64(w))
	}
	nf.version = v
	*f = *nf
	return nil
}

// DecodeFilter decodes a full encoding.
func DecodeFilter(b []byte) (*Filter, error) {
	f := new(Filter)
	if err := f.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	return f, nil
}

// Delta is a decoded delta: the words that changed between two versions of
// a filter, with their new values.
type Delta struct {
	Geometry Geometry
	Base     uint64   // version the delta applies to
	Next     uint64   // version after applying it
	Index    []uint64 // word indices, strictly increasing
	Words    []uint64 // new word values, parallel to Index
}

// AppendDelta appends the delta encoding of the words changed since the last
// Mark (from version Version() to Version()+1). It does not Mark.
func (f *Filter) AppendDelta(dst []byte) []byte {
	start := len(dst)
	dst = putHeader(dst, magicDelta, f.geo, f.version)
	dst = binary.LittleEndian.AppendUint64(dst, f.version+1)
	dst = binary.AppendUvarint(dst, uint64(f.ndirty))
	prev := int64(-1)
	for d, dw := range f.dirty {
		for dw != 0 {
			t := bits.TrailingZeros64(dw)
			dw &= dw - 1
			w := int64(d*64 + t)
			dst = binary.AppendUvarint(dst, uint64(w-prev-1))
			dst = binary.LittleEndian.AppendUint64(dst, f.words[w])
			prev = w
		}
	}
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// MarkDelta appends the delta since the last Mark and then Marks: the usual
// step of an owner pushing its changes to replicas.
func (f *Filter) MarkDelta(dst []byte) []byte {
	dst = f.AppendDelta(dst)
	f.Mark()
	return dst
}

// DecodeDelta decodes and checks a delta encoding. Bad input returns an
// error wrapping ErrCorrupt, never a panic.
func DecodeDelta(b []byte) (*Delta, error) {
	g, base, body, err := readHeader(b, magicDelta)
	if err != nil {
		return nil, err
	}
	if len(body) < 8 {
		return nil, fmt.Errorf("delta without next version: %w", ErrCorrupt)
	}
	d := &Delta{Geometry: g, Base: base, Next: binary.LittleEndian.Uint64(body)}
	body = body[8:]
	n, sz := binary.Uvarint(body)
	if sz <= 0 {
		return nil, fmt.Errorf("delta word count: %w", ErrCorrupt)
	}
	body = body[sz:]
	// Each entry takes at least 9 bytes; refuse counts the input cannot hold.
	if n > uint64(len(body)/9) || n > uint64(g.Words()) {
		return nil, fmt.Errorf("delta claims %d words in %d bytes: %w", n, len(body), ErrCorrupt)
	}
	d.Index = make([]uint64, n)
	d.Words = make([]uint64, n)
	next := uint64(0)
	for i := uint64(0); i < n; i++ {
		gap, sz := binary.Uvarint(body)
		if sz <= 0 || len(body)-sz < 8 {
			return nil, fmt.Errorf("delta entry %d truncated: %w", i, ErrCorrupt)
		}
		body = body[sz:]
		idx := next + gap
		if idx < next || idx >= uint64(g.Words()) {
			return nil, fmt.Errorf("delta word index %d out of range: %w", idx, ErrCorrupt)
		}
		d.Index[i] = idx
		d.Words[i] = binary.LittleEndian.Uint64(body)
		body = body[8:]
		next = idx + 1
	}
	if len(body) != 0 {
		return nil, fmt.Errorf("%d trailing bytes after delta: %w", len(body), ErrCorrupt)
	}
	return d, nil
}

// ApplyDelta applies a delta encoding to a replica at the delta's base
// version. A different geometry returns ErrGeometryMismatch and a different
// version ErrVersionMismatch (the caller then fetches the full filter); in
// both cases f is unchanged.
func (f *Filter) ApplyDelta(b []byte) error {
	d, err := DecodeDelta(b)
	if err != nil {
		return err
	}
	return f.Apply(d)
}

// Apply applies a decoded delta; see ApplyDelta.
func (f *Filter) Apply(d *Delta) error {
	if d.Geometry != f.geo {
		return fmt.Errorf("delta %s onto %s: %w", d.Geometry, f.geo, ErrGeometryMismatch)
	}
	if d.Base != f.version {
		return fmt.Errorf("delta from version %d onto version %d: %w", d.Base, f.version, ErrVersionMismatch)
	}
	if len(d.Index) != len(d.Words) {
		return fmt.Errorf("delta with %d indices and %d words: %w", len(d.Index), len(d.Words), ErrCorrupt)
	}
	for _, idx := range d.Index {
		if idx >= uint64(len(f.words)) {
			return fmt.Errorf("delta word index %d out of range: %w", idx, ErrCorrupt)
		}
	}
	for i, idx := range d.Index {
		old := f.words[idx]
		f.ones += uint64(bits.OnesCount64(d.Words[i]))
		f.ones -= uint64(bits.OnesCount64(old))
		f.words[idx] = d.Words[i]
	}
	f.version = d.Next
	return nil
}
