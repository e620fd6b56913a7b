package routing

import (
	"math/rand/v2"
	"testing"
)

var benchSinkBool bool

// BenchmarkFilterTest measures one membership test against a filter of 2^20
// files at 8 bits per file (1 MiB, k = 6), half of the queries present,
// with the path hashed in the loop (string) or beforehand (key).
func BenchmarkFilterTest(b *testing.B) {
	const files = 1 << 20
	present := filterTestPaths("bench/in", files, 50)
	queries := make([]string, 4096)
	copy(queries, present[:len(queries)/2])
	copy(queries[len(queries)/2:], filterTestPaths("bench/out", len(queries)/2, 51))
	rand.New(rand.NewPCG(52, 0)).Shuffle(len(queries), func(i, j int) { queries[i], queries[j] = queries[j], queries[i] })
	for _, h := range hashKinds {
		g, err := NewGeometry(files, 8, 0, h)
		if err != nil {
			b.Fatal(err)
		}
		f := NewFilter(g)
		for _, p := range present {
			f.Add(p)
		}
		keys := make([]Key, len(queries))
		for i, q := range queries {
			keys[i] = HashPath(h, q)
		}
		b.Run(h.String()+"/string", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				benchSinkBool = f.Test(queries[i&(len(queries)-1)])
				i++
			}
		})
		b.Run(h.String()+"/key", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				benchSinkBool = f.TestKey(keys[i&(len(keys)-1)])
				i++
			}
		})
	}
}

// BenchmarkLRUTouch measures Touch on a full LRU of 1,600 entries (HBA's
// LRU size, 20 bits per entry) in steady state: the access sequence draws
// 85% of its paths from 1,000 hot ones (hits, moved to the front) and 15%
// from 20,000 cold ones (mostly misses: an insertion and an eviction, each
// updating the counting filter). Paths and the sequence are built first.
func BenchmarkLRUTouch(b *testing.B) {
	const capacity, hot, cold = 1600, 1000, 20000
	paths := filterTestPaths("bench/lru", hot+cold, 53)
	r := rand.New(rand.NewPCG(54, 0))
	seq := make([]string, 1<<16)
	for i := range seq {
		if r.IntN(100) < 85 {
			seq[i] = paths[r.IntN(hot)]
		} else {
			seq[i] = paths[hot+r.IntN(cold)]
		}
	}
	g, err := NewGeometry(capacity, 20, 0, HashXX)
	if err != nil {
		b.Fatal(err)
	}
	l := NewLRU(capacity, g)
	evictions := 0
	for _, p := range seq { // warm up: fill the list
		l.Touch(p)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok := l.Touch(seq[i&(len(seq)-1)]); ok {
			evictions++
		}
		i++
	}
	b.ReportMetric(float64(evictions)/float64(i), "evictions/op")
}

// BenchmarkFrequencyLRUTouch is BenchmarkLRUTouch with admission by
// frequency (FrequencyLRU): the same list size and access sequence, every
// access also inserted into the ABF sketch, which is cleared every 16,000
// accesses.
func BenchmarkFrequencyLRUTouch(b *testing.B) {
	const capacity, hot, cold = 1600, 1000, 20000
	paths := filterTestPaths("bench/lru", hot+cold, 53)
	r := rand.New(rand.NewPCG(54, 0))
	seq := make([]string, 1<<16)
	for i := range seq {
		if r.IntN(100) < 85 {
			seq[i] = paths[r.IntN(hot)]
		} else {
			seq[i] = paths[hot+r.IntN(cold)]
		}
	}
	g, err := NewGeometry(capacity, 20, 0, HashXX)
	if err != nil {
		b.Fatal(err)
	}
	f := NewFrequencyLRU(capacity, g)
	for _, p := range seq { // warm up
		f.Touch(p)
	}
	b.ReportAllocs()
	i, evictions, admitted := 0, 0, 0
	for b.Loop() {
		_, ok, adm := f.Touch(seq[i&(len(seq)-1)])
		if ok {
			evictions++
		}
		if adm {
			admitted++
		}
		i++
	}
	b.ReportMetric(float64(evictions)/float64(i), "evictions/op")
	b.ReportMetric(float64(admitted)/float64(i), "listed/op")
}
