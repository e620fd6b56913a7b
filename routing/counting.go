package routing

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Counting Bloom filter (Fan et al., used by HBA §4.2.2 for the LRU filter
// and by G-HBA §2.3 for the IDBFA and the local filters): every bit of a
// Bloom filter becomes a small counter so that elements can be deleted.

const (
	counterBits = 4                  // bits per counter
	counterMax  = 1<<counterBits - 1 // saturation value (15)
	countersPer = 64 / counterBits   // counters per uint64 (16)
	counterMask = uint64(counterMax) // mask of one counter
	countersLog = 4                  // log2(countersPer)
	countersLow = uint64(countersPer - 1)
)

var magicCounting = [4]byte{'G', 'H', 'B', 'C'}

// CountingFilter is a counting Bloom filter with 4-bit saturating counters
// packed 16 per uint64. A counter that reaches 15 sticks there: it is never
// incremented or decremented again, so an overflow can only cause false
// positives, never false negatives.
//
// Alongside the counters it keeps a plain Filter of the same geometry whose
// bit b is set exactly when counter b is non-zero. That view is what the
// owner replicates: its change tracking (ChangedFraction, MarkDelta) counts
// the bits that the counters switched on or off. The view is live and must
// be treated as read-only apart from Mark, MarkDelta and the encoders.
//
// Removing an element that was never added is the classic hazard of
// counting filters: if it tests negative Remove refuses it, but if it is a
// false positive the decrements can create false negatives for other
// elements. Callers only remove what they added.
//
// A CountingFilter is not safe for concurrent use; callers serialize access.
type CountingFilter struct {
	geo      Geometry
	counters []uint64 // counter b is (counters[b/16] >> 4·(b%16)) & 15
	view     *Filter
}

// NewCountingFilter returns an empty counting filter. It panics if g is
// invalid; check user-supplied geometries with Validate first.
func NewCountingFilter(g Geometry) *CountingFilter {
	return &CountingFilter{
		geo:      g,
		view:     NewFilter(g), // validates g
		counters: make([]uint64, g.M/countersPer),
	}
}

// Geometry returns the filter's geometry.
func (c *CountingFilter) Geometry() Geometry { return c.geo }

// Filter returns the live plain view: bit b is set exactly when counter b
// is non-zero. Every call returns the same object. Use its Test, Mark,
// MarkDelta and AppendBinary; do not modify its bits directly.
func (c *CountingFilter) Filter() *Filter { return c.view }

// counter returns counter b.
func (c *CountingFilter) counter(b uint64) uint64 {
	return c.counters[b>>countersLog] >> ((b & countersLow) * counterBits) & counterMask
}

// Add inserts path.
func (c *CountingFilter) Add(path string) { c.AddKey(HashPath(c.geo.Hash, path)) }

// AddKey inserts a pre-hashed key. The key must have the filter's hash kind.
func (c *CountingFilter) AddKey(k Key) {
	for i := uint32(0); i < c.geo.K; i++ {
		b := k.index(i, c.geo.M)
		w, s := b>>countersLog, (b&countersLow)*counterBits
		switch v := c.counters[w] >> s & counterMask; v {
		case counterMax: // saturated: stays
		case 0:
			c.counters[w] += 1 << s
			c.view.setBit(b)
		default:
			c.counters[w] += 1 << s
		}
	}
}

// Remove deletes one occurrence of path. It returns false and changes
// nothing when path is certainly absent (one of its counters is zero, or
// lower than the number of its hash functions that map to that counter).
// Saturated counters are not decremented.
func (c *CountingFilter) Remove(path string) bool {
	return c.RemoveKey(HashPath(c.geo.Hash, path))
}

// RemoveKey is Remove for a pre-hashed key.
func (c *CountingFilter) RemoveKey(k Key) bool {
	var idx [MaxHashes]uint64
	n := int(c.geo.K)
	for i := 0; i < n; i++ {
		idx[i] = k.index(uint32(i), c.geo.M)
	}
	// Check first, so that a refused removal changes nothing. Two hash
	// functions can pick the same counter; the key then added 2 to it and
	// needs it to be at least 2.
	for i := 0; i < n; i++ {
		v := c.counter(idx[i])
		if v == counterMax {
			continue
		}
		need := uint64(1)
		for j := 0; j < i; j++ {
			if idx[j] == idx[i] {
				need++
			}
		}
		if v < need {
			return false
		}
	}
	for i := 0; i < n; i++ {
		b := idx[i]
		w, s := b>>countersLog, (b&countersLow)*counterBits
		switch c.counters[w] >> s & counterMask {
		case counterMax: // saturated: stays
		case 1:
			c.counters[w] -= 1 << s
			c.view.clearBit(b)
		default:
			c.counters[w] -= 1 << s
		}
	}
	return true
}

// Test reports whether path may be in the set (no false negatives).
func (c *CountingFilter) Test(path string) bool { return c.view.Test(path) }

// TestKey is Test for a pre-hashed key.
func (c *CountingFilter) TestKey(k Key) bool { return c.view.TestKey(k) }

// Saturated returns the number of counters stuck at 15. Each of them may
// keep a bit set after all its elements are removed.
func (c *CountingFilter) Saturated() int {
	n := 0
	for _, w := range c.counters {
		for ; w != 0; w >>= counterBits {
			if w&counterMask == counterMax {
				n++
			}
		}
	}
	return n
}

// Clone returns a deep copy, including the view's version and change
// tracking.
func (c *CountingFilter) Clone() *CountingFilter {
	return &CountingFilter{
		geo:      c.geo,
		counters: append([]uint64(nil), c.counters...),
		view:     c.view.Clone(),
	}
}

// SizeBytes is the memory of the counters plus the plain view:
// M/2 + M/8 bytes, 5/8 of a byte per bit of the geometry.
func (c *CountingFilter) SizeBytes() int {
	return len(c.counters)*8 + c.view.SizeBytes()
}

// Encoding layout (little-endian), in the style of bloom.go:
//
//	"GHBC" | format u8 | hash u8 | k u8 | 0 u8 | m u64 | version u64 |
//	counters [m/16]u64 | crc32c u32
//
// version is the version of the plain view. The CRC (Castagnoli) covers
// every byte before it.

// AppendBinary appends the full encoding of c (geometry, view version,
// counters, checksum) to dst.
func (c *CountingFilter) AppendBinary(dst []byte) []byte {
	start := len(dst)
	dst = putHeader(dst, magicCounting, c.geo, c.view.version)
	for _, w := range c.counters {
		dst = binary.LittleEndian.AppendUint64(dst, w)
	}
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// MarshalBinary implements encoding.BinaryMarshaler.
func (c *CountingFilter) MarshalBinary() ([]byte, error) {
	return c.AppendBinary(make([]byte, 0, headerLen+len(c.counters)*8+crcLen)), nil
}

// UnmarshalBinary implements encoding.BinaryUnmarshaler: it replaces c with
// the decoded filter. The view rebuilt from the counters carries the
// encoded version and no pending changes; when c already had a view, that
// same object is updated in place. Bad input returns an error wrapping
// ErrCorrupt and leaves c unchanged.
func (c *CountingFilter) UnmarshalBinary(b []byte) error {
	g, v, body, err := readHeader(b, magicCounting)
	if err != nil {
		return fmt.Errorf("counting filter: %w", err)
	}
	nc, err := decodeCounters(g, v, body)
	if err != nil {
		return fmt.Errorf("counting filter: %w", err)
	}
	if c.view != nil {
		*c.view = *nc.view
		nc.view = c.view
	}
	*c = *nc
	return nil
}

// decodeCounters builds a counting filter of geometry g from its encoded
// counters; the plain view gets version v.
func decodeCounters(g Geometry, v uint64, body []byte) (*CountingFilter, error) {
	if uint64(len(body)) != g.M/countersPer*8 {
		return nil, fmt.Errorf("%d bytes of counters for m=%d: %w", len(body), g.M, ErrCorrupt)
	}
	nc := NewCountingFilter(g)
	for i := range nc.counters {
		w := binary.LittleEndian.Uint64(body[i*8:])
		nc.counters[i] = w
		for j := uint64(0); w != 0; j, w = j+1, w>>counterBits {
			if w&counterMask != 0 {
				b := uint64(i)*countersPer + j
				nc.view.words[b>>6] |= 1 << (b & 63)
				nc.view.ones++
			}
		}
	}
	nc.view.version = v
	return nc, nil
}

// DecodeCountingFilter decodes a full counting-filter encoding.
func DecodeCountingFilter(b []byte) (*CountingFilter, error) {
	c := new(CountingFilter)
	if err := c.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	return c, nil
}
