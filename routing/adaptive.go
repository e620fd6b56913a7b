package routing

// AdaptiveFilter is the Adaptive Bloom Filter (ABF) of Matsumoto et al.
// described in g-hba-survey §V: a Bloom filter that also estimates how
// many times an element was inserted, in the same bit vector.
//
// An element whose k base bits are not all set is inserted like in a plain
// Bloom filter. Otherwise the insertion probes the extra hash functions
// H_{k+1}, H_{k+2}, … and sets the bit of the first one, H_{k+N}, whose bit
// is clear (Algorithm 1): an element inserted c times has its k base bits
// and the bits of H_{k+1..k+c-1} set, so a query, which walks the same run
// (Algorithm 2), returns at least c. Like the presence answer, the count
// errs only upwards.
//
// The number of extra hash functions is bounded by MaxExtra, at most
// MaxHashes−k; once they are all set for an element its count saturates.
// The bit vector is an ordinary Filter of the same geometry (Filter), so the
// ABF can be replicated and tested like any other filter.
//
// An AdaptiveFilter is not safe for concurrent use; callers serialize
// access.
type AdaptiveFilter struct {
	f        *Filter
	maxExtra uint32
}

// NewAdaptiveFilter returns an empty ABF of geometry g with up to maxExtra
// additional hash functions; maxExtra is clamped to 0..MaxHashes−g.K. It
// panics if g is invalid.
func NewAdaptiveFilter(g Geometry, maxExtra int) *AdaptiveFilter {
	f := NewFilter(g) // validates g
	maxExtra = min(max(maxExtra, 0), MaxHashes-int(g.K))
	return &AdaptiveFilter{f: f, maxExtra: uint32(maxExtra)}
}

// Geometry returns the geometry of the bit vector (K is the base k).
func (a *AdaptiveFilter) Geometry() Geometry { return a.f.geo }

// MaxExtra returns the number of additional hash functions.
func (a *AdaptiveFilter) MaxExtra() int { return int(a.maxExtra) }

// Filter returns the live bit vector as a plain Bloom filter of the base k
// hash functions: every inserted element tests positive. Do not modify it.
func (a *AdaptiveFilter) Filter() *Filter { return a.f }

// Add inserts path (g-hba-survey §V, Algorithm 1) and returns N, the number
// of additional hash functions the insertion used: 0 when path's k base
// bits were not all set (they are now), otherwise the index N ≥ 1 of the
// extra function H_{k+N} whose bit it set. When the bits of all MaxExtra
// extra functions are already set, nothing changes and Add returns
// MaxExtra+1.
func (a *AdaptiveFilter) Add(path string) int { return a.AddKey(HashPath(a.f.geo.Hash, path)) }

// AddKey is Add for a pre-hashed key.
func (a *AdaptiveFilter) AddKey(k Key) int {
	g := a.f.geo
	if !a.f.TestKey(k) {
		a.f.AddKey(k)
		return 0
	}
	n := a.run(k)
	if n <= a.maxExtra {
		a.f.setBit(k.index(g.K+n-1, g.M))
	}
	return int(n)
}

// Query returns N for path (g-hba-survey §V, Algorithm 2): 0 when path is
// absent (one of its k base bits is clear), otherwise the index of the first
// extra hash function whose bit is clear (MaxExtra+1 if none is). An element
// inserted c ≥ 1 times gets N ≥ c: N estimates the insertion count and
// never underestimates it, up to MaxExtra+1.
func (a *AdaptiveFilter) Query(path string) int { return a.QueryKey(HashPath(a.f.geo.Hash, path)) }

// QueryKey is Query for a pre-hashed key.
func (a *AdaptiveFilter) QueryKey(k Key) int {
	if !a.f.TestKey(k) {
		return 0
	}
	return int(a.run(k))
}

// Test reports whether path may have been inserted (Query > 0).
func (a *AdaptiveFilter) Test(path string) bool { return a.f.Test(path) }

// run returns the smallest N ≥ 1 whose bit H_{k+N} is clear, or
// maxExtra+1. The i-th hash function (from 1) is Key.index(i-1).
func (a *AdaptiveFilter) run(k Key) uint32 {
	g := a.f.geo
	n := uint32(1)
	for ; n <= a.maxExtra; n++ {
		b := k.index(g.K+n-1, g.M)
		if a.f.words[b>>6]&(1<<(b&63)) == 0 {
			break
		}
	}
	return n
}

// SizeBytes is the memory of the bit vector.
func (a *AdaptiveFilter) SizeBytes() int { return a.f.SizeBytes() }
