package routing

import "fmt"

// Admission by frequency for the L1 of HBA (§4.2.2): the LRU list, and so
// the LRU filter replicated to every node, takes a path only once it has
// been seen more than once within a recent window. The frequency sketch is
// the Adaptive Bloom Filter of g-hba-survey §V (AdaptiveFilter): its count
// for a path estimates how often the path was inserted, never below the
// truth. A one-time scan of many distinct paths then passes through the
// sketch without entering the list, and the hot set stays listed.

// Sizing of the admission window and of its sketch (see NewFrequencyLRU).
const (
	// AdmissionWindowFactor is W / capacity: the sketch is cleared every W
	// = AdmissionWindowFactor × capacity accesses.
	AdmissionWindowFactor = 10
	// AdmissionBitsPerAccess sizes the sketch: W accesses at 10 bits each
	// (k = 7), so even a window of W distinct paths — a pure scan — leaves
	// the plain false-positive rate below 1%.
	AdmissionBitsPerAccess = 10
	// AdmissionThreshold is the count at which a path is admitted: seen
	// at least twice within the window.
	AdmissionThreshold = 2
)

// FrequencyLRU is an LRU list (HBA §4.2.2, type LRU) with admission by
// frequency: every access is inserted into an Adaptive Bloom Filter
// (g-hba-survey §V, Algorithm 1), and a path that is not on the list enters
// it only when the insertion finds it already present, that is when its ABF
// count reaches AdmissionThreshold (2) within the current window. A path on
// the list is refreshed (moved to the front) by every access, as in LRU.
//
// Window and aging: the sketch is cleared every W accesses (Window), so the
// count is of the accesses since the last clear — a tumbling window of W;
// a path seen once just before a clear needs two sightings after it. A
// Bloom filter's bits cannot be halved, and the bits a path sets are
// shared with others, so clearing is the aging. W is
// AdmissionWindowFactor × capacity: a path whose accesses are at most W
// apart is admitted, which covers anything that would have stayed on the
// list long enough to be hit again under LRU, while a scan that touches
// each path once never is.
//
// Sizing: the ABF has W × AdmissionBitsPerAccess bits and k =
// OptimalHashes(10) = 7 base hash functions, with one extra hash function
// (H_{k+1}): admission needs only to tell a count of 1 from 2, and a
// single extra function sets at most one extra bit per distinct path. A
// path seen for the first time is wrongly admitted only when all its k base
// bits are already set, under 1% even when the window is a pure scan. For
// HBA's LRU of 1,600 entries this is 160,000 bits (20 KB) per server, held
// locally and never replicated.
//
// Touch does not allocate in steady state. A FrequencyLRU is not safe for
// concurrent use; callers serialize access.
type FrequencyLRU struct {
	lru    *LRU
	abf    *AdaptiveFilter
	window int
	seen   int // accesses since the last clear
	admits int64
	clears int64
}

// NewFrequencyLRU returns an empty LRU list of at most capacity paths whose
// filter has geometry g (as NewLRU), with admission by frequency over a
// window of AdmissionWindowFactor × capacity accesses. It panics if g is
// invalid, as NewLRU does.
func NewFrequencyLRU(capacity int, g Geometry) *FrequencyLRU {
	capacity = max(capacity, 0)
	window := AdmissionWindowFactor * max(capacity, 1)
	ag, err := NewGeometry(window, AdmissionBitsPerAccess, 0, g.Hash)
	if err != nil {
		panic(fmt.Errorf("routing: admission sketch geometry: %w", err))
	}
	return &FrequencyLRU{
		lru:    NewLRU(capacity, g),
		abf:    NewAdaptiveFilter(ag, AdmissionThreshold-1),
		window: window,
	}
}

// Touch records an access to path: it is inserted into the sketch; if path
// is on the list it moves to the front, otherwise it is inserted at the
// front (and into the LRU filter) only when this is at least its second
// sighting in the window. admitted reports whether path is on the list
// after the call; evicted and ok are as for LRU.Touch.
func (f *FrequencyLRU) Touch(path string) (evicted string, ok, admitted bool) {
	f.seen++
	if f.seen > f.window {
		f.abf.f.Reset()
		f.abf.f.Mark() // the sketch is never replicated: drop the change tracking
		f.seen = 1
		f.clears++
	}
	n := f.abf.Add(path) // 0: first sighting; ≥ 1: count now ≥ 2
	if f.lru.Contains(path) {
		f.lru.Touch(path)
		return "", false, true
	}
	if n+1 < AdmissionThreshold || f.lru.Cap() == 0 {
		return "", false, false
	}
	f.admits++
	evicted, ok = f.lru.Touch(path)
	return evicted, ok, true
}

// Count returns the sketch's estimate of how many times path was accessed
// in the current window (g-hba-survey §V, Algorithm 2), capped at
// AdmissionThreshold; 0 means not seen.
func (f *FrequencyLRU) Count(path string) int { return f.abf.Query(path) }

// LRU returns the underlying list. Its Remove, and its Touch (which
// bypasses admission, e.g. to carry a listed path over a rename), may be
// used directly.
func (f *FrequencyLRU) LRU() *LRU { return f.lru }

// Filter returns the live plain view of the LRU filter (LRU.Filter).
func (f *FrequencyLRU) Filter() *Filter { return f.lru.Filter() }

// Contains reports whether path is on the list.
func (f *FrequencyLRU) Contains(path string) bool { return f.lru.Contains(path) }

// Remove deletes path from the list and the filter (LRU.Remove). The
// sketch keeps its count until the next clear.
func (f *FrequencyLRU) Remove(path string) bool { return f.lru.Remove(path) }

// Len returns the number of paths on the list.
func (f *FrequencyLRU) Len() int { return f.lru.Len() }

// Cap returns the capacity of the list.
func (f *FrequencyLRU) Cap() int { return f.lru.Cap() }

// Window returns W, the number of accesses between two clears of the
// sketch.
func (f *FrequencyLRU) Window() int { return f.window }

// Admissions returns how many paths were admitted to the list by Touch.
func (f *FrequencyLRU) Admissions() int64 { return f.admits }

// Clears returns how many times the sketch was cleared.
func (f *FrequencyLRU) Clears() int64 { return f.clears }

// SketchBytes is the memory of the admission sketch (the ABF's bits).
func (f *FrequencyLRU) SketchBytes() int { return f.abf.SizeBytes() }

// SizeBytes is the memory of the list (LRU.SizeBytes) plus the sketch.
func (f *FrequencyLRU) SizeBytes() int { return f.lru.SizeBytes() + f.abf.SizeBytes() }
