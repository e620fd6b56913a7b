// Package routing holds the pure data structures of HBA and G-HBA: Bloom
// filters, counting Bloom filters, the LRU filter, bit-sliced filter arrays
// with the unique-hit rule, the IDBFA, the adaptive Bloom filter, and the
// papers' analytical formulas. It does no I/O: the server, the simulator and
// the benchmarks share exactly this implementation.
//
// Paths are hashed as given; callers normalize full paths first (the papers
// hash the full path name, HBA §4.2.2).
package routing

import (
	"crypto/md5"
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// HashKind selects how a path is turned into the k bit indices of a filter.
type HashKind uint8

const (
	// HashXX is the default: one 64-bit xxHash of the path expanded into k
	// indices by double hashing (Kirsch–Mitzenmacher).
	HashXX HashKind = 1
	// HashMD5 reproduces the papers: the MD5 signature of the full path name
	// hashed into indices by universal hash functions (HBA §4.2.2).
	HashMD5 HashKind = 2
)

// MaxHashes bounds k; the papers never use more than a handful and the
// universal-hash table below has this many functions.
const MaxHashes = 32

// String returns "xx" or "md5".
func (h HashKind) String() string {
	switch h {
	case HashXX:
		return "xx"
	case HashMD5:
		return "md5"
	}
	return fmt.Sprintf("hash(%d)", uint8(h))
}

// ParseHashKind accepts "xx" (or "xxhash") and "md5".
func ParseHashKind(s string) (HashKind, error) {
	switch s {
	case "xx", "xxhash", "":
		return HashXX, nil
	case "md5":
		return HashMD5, nil
	}
	return 0, fmt.Errorf("unknown hash %q (want xx or md5): %w", s, ErrInvalidGeometry)
}

func (h HashKind) valid() bool { return h == HashXX || h == HashMD5 }

// Key is a path hashed once. A Key can probe any number of filters that share
// a hash kind, which is what a filter array does: hash once, probe p filters.
type Key struct {
	h1, h2 uint64
	kind   HashKind
}

// HashPath hashes a (normalized, full) path with the given kind. It does not
// allocate.
func HashPath(kind HashKind, path string) Key {
	if kind == HashMD5 {
		// md5.Sum only reads its argument, so hash the string's bytes in
		// place: []byte(path) would allocate a copy for paths over 32 bytes.
		return md5Key(md5.Sum(unsafe.Slice(unsafe.StringData(path), len(path))))
	}
	h := xxhash.Sum64String(path)
	// The second hash is a strong remix of the first, forced odd so that
	// h1 + i*h2 visits distinct residues.
	return Key{h1: h, h2: mix64(h) | 1, kind: HashXX}
}

// HashBytes is HashPath for a byte slice (for example an origin id).
func HashBytes(kind HashKind, b []byte) Key {
	if kind == HashMD5 {
		return md5Key(md5.Sum(b))
	}
	h := xxhash.Sum64(b)
	return Key{h1: h, h2: mix64(h) | 1, kind: HashXX}
}

// md5Key splits an MD5 signature into the two 64-bit halves of a Key.
func md5Key(sum [md5.Size]byte) Key {
	var a, b uint64
	for i := 0; i < 8; i++ {
		a = a<<8 | uint64(sum[i])
		b = b<<8 | uint64(sum[8+i])
	}
	return Key{h1: a, h2: b, kind: HashMD5}
}

// mix64 is the splitmix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// mersenne61 is the prime 2^61-1 used by the universal hash family.
const mersenne61 = (1 << 61) - 1

// universal holds the (a, b) pairs of h_i(x) = ((a·x + b) mod P) mod m,
// drawn once from a fixed seed so every node computes the same indices.
var universal = func() (t [MaxHashes][2]uint64) {
	s := uint64(0x6768626120686261) // "ghba hba"
	for i := range t {
		s += 0x9e3779b97f4a7c15
		a := mix64(s) % mersenne61
		if a == 0 {
			a = 1
		}
		s += 0x9e3779b97f4a7c15
		t[i] = [2]uint64{a, mix64(s) % mersenne61}
	}
	return t
}()

// mulmod61 returns a·b mod 2^61-1 for a, b < 2^61.
func mulmod61(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	// a·b = hi·2^64 + lo; 2^64 ≡ 2^3 (mod 2^61-1).
	r := (lo & mersenne61) + (lo >> 61) + (hi << 3)
	r = (r & mersenne61) + (r >> 61)
	if r >= mersenne61 {
		r -= mersenne61
	}
	return r
}

// reduce maps a 64-bit value uniformly onto [0, m) without division
// (Lemire's multiply-shift).
func reduce(x, m uint64) uint64 {
	hi, _ := bits.Mul64(x, m)
	return hi
}

// index returns the i-th bit index of key in a filter of m bits.
func (k Key) index(i uint32, m uint64) uint64 {
	if k.kind == HashMD5 {
		x := (k.h1 ^ bits.RotateLeft64(k.h2, 29)) % mersenne61
		u := universal[i]
		v := mulmod61(u[0], x) + u[1]
		if v >= mersenne61 {
			v -= mersenne61
		}
		return v % m
	}
	return reduce(k.h1+uint64(i)*k.h2, m)
}

// OptimalHashes returns the k that minimizes the false-positive rate of a
// standard Bloom filter at the given bits per element: k = (m/n)·ln 2,
// rounded, at least 1 and at most MaxHashes.
func OptimalHashes(bitsPerElement float64) int {
	k := int(math.Round(bitsPerElement * math.Ln2))
	if k < 1 {
		k = 1
	}
	if k > MaxHashes {
		k = MaxHashes
	}
	return k
}
