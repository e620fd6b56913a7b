package routing

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"
	"testing"
)

// Fuzz tests for every decoder: any input returns a value or an error
// wrapping ErrCorrupt (or, for deltas, ErrGeometryMismatch or
// ErrVersionMismatch), never a panic; whatever decodes re-encodes to the
// same bytes. Each input is also tried with its checksum recomputed
// (reseal), so the fuzzer reaches the parsing behind the CRC.

// fuzzGeometries are small, so that the seeds are short.
var fuzzGeometries = []Geometry{
	{M: 64, K: 1, Hash: HashXX},
	{M: 128, K: 3, Hash: HashMD5},
	{M: 256, K: 4, Hash: HashXX},
}

func fuzzPaths(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("/f/%d", i)
	}
	return out
}

func fuzzInputs(data []byte) [][]byte { return [][]byte{data, reseal(data)} }

func FuzzDecodeFilter(f *testing.F) {
	for _, g := range fuzzGeometries {
		fl := NewFilter(g)
		f.Add(fl.AppendBinary(nil))
		for _, p := range fuzzPaths(10) {
			fl.Add(p)
		}
		fl.Mark()
		f.Add(fl.AppendBinary(nil))
	}
	f.Add([]byte{})
	f.Add([]byte("GHBF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, b := range fuzzInputs(data) {
			fl, err := DecodeFilter(b)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error %v does not wrap ErrCorrupt", err)
				}
				continue
			}
			if !bytes.Equal(fl.AppendBinary(nil), b) {
				t.Fatal("decoded filter re-encodes differently")
			}
			var ones uint64
			fl.ForEachWord(func(_ int, w uint64) { ones += uint64(bits.OnesCount64(w)) })
			if ones != fl.Ones() {
				t.Fatalf("Ones %d, counted %d", fl.Ones(), ones)
			}
			other := NewFilter(fuzzGeometries[0])
			if err := other.UnmarshalBinary(b); err != nil || !other.Equal(fl) || other.Version() != fl.Version() {
				t.Fatalf("UnmarshalBinary disagrees with DecodeFilter: %v", err)
			}
			fl.Add("/after/decode")
			if !fl.Test("/after/decode") {
				t.Fatal("decoded filter is not usable")
			}
		}
	})
}

func FuzzApplyDelta(f *testing.F) {
	target := NewFilter(fuzzGeometries[2])
	for _, g := range fuzzGeometries {
		fl := NewFilter(g)
		f.Add(fl.AppendDelta(nil)) // empty delta
		for i, p := range fuzzPaths(12) {
			fl.Add(p)
			if i%4 == 3 {
				f.Add(fl.MarkDelta(nil))
			}
		}
	}
	f.Add([]byte{})
	f.Add([]byte("GHBD"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, b := range fuzzInputs(data) {
			d, derr := DecodeDelta(b)
			tc := target.Clone()
			aerr := tc.ApplyDelta(b)
			if derr != nil {
				if !errors.Is(derr, ErrCorrupt) {
					t.Fatalf("DecodeDelta error %v does not wrap ErrCorrupt", derr)
				}
				if !errors.Is(aerr, ErrCorrupt) {
					t.Fatalf("ApplyDelta of an undecodable delta: %v", aerr)
				}
			} else {
				checkDecodedDelta(t, d)
				switch {
				case aerr == nil:
					if d.Geometry != target.Geometry() || d.Base != target.Version() || tc.Version() != d.Next {
						t.Fatal("ApplyDelta accepted a delta it should refuse")
					}
				case errors.Is(aerr, ErrGeometryMismatch):
					if d.Geometry == target.Geometry() {
						t.Fatalf("geometry mismatch on equal geometries: %v", aerr)
					}
				case errors.Is(aerr, ErrVersionMismatch):
					if d.Base == target.Version() {
						t.Fatalf("version mismatch on equal versions: %v", aerr)
					}
				default:
					t.Fatalf("ApplyDelta of a decodable delta: %v", aerr)
				}
			}
			if aerr != nil && (!tc.Equal(target) || tc.Version() != target.Version()) {
				t.Fatal("a refused delta changed the filter")
			}
		}
	})
}

// checkDecodedDelta checks a decoded delta's invariants and applies it to a
// filter of its geometry at its base version.
func checkDecodedDelta(t *testing.T, d *Delta) {
	t.Helper()
	if len(d.Index) != len(d.Words) {
		t.Fatalf("%d indices, %d words", len(d.Index), len(d.Words))
	}
	for i, idx := range d.Index {
		if idx >= uint64(d.Geometry.Words()) || (i > 0 && idx <= d.Index[i-1]) {
			t.Fatalf("index %d = %d out of order or range", i, idx)
		}
	}
	if d.Geometry.M > 1<<16 {
		return // do not allocate a huge filter
	}
	r := NewFilter(d.Geometry)
	r.version = d.Base
	if err := r.Apply(d); err != nil || r.Version() != d.Next {
		t.Fatalf("Apply at the base version: %v", err)
	}
	var ones uint64
	for i, idx := range d.Index {
		if r.Word(int(idx)) != d.Words[i] {
			t.Fatalf("word %d not applied", idx)
		}
	}
	r.ForEachWord(func(_ int, w uint64) { ones += uint64(bits.OnesCount64(w)) })
	if ones != r.Ones() {
		t.Fatalf("Ones %d after Apply, counted %d", r.Ones(), ones)
	}
}

func FuzzDecodeCountingFilter(f *testing.F) {
	for _, g := range fuzzGeometries {
		c := NewCountingFilter(g)
		f.Add(c.AppendBinary(nil))
		for _, p := range fuzzPaths(8) {
			c.Add(p)
		}
		for range 16 {
			c.Add("/hot")
		}
		c.Filter().Mark()
		f.Add(c.AppendBinary(nil))
	}
	f.Add([]byte{})
	f.Add([]byte("GHBC"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, b := range fuzzInputs(data) {
			c, err := DecodeCountingFilter(b)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error %v does not wrap ErrCorrupt", err)
				}
				continue
			}
			if !bytes.Equal(c.AppendBinary(nil), b) {
				t.Fatal("decoded counting filter re-encodes differently")
			}
			var ones uint64
			for i := uint64(0); i < c.Geometry().M; i++ {
				set := c.view.words[i>>6]&(1<<(i&63)) != 0
				if set != (c.counter(i) != 0) {
					t.Fatalf("view bit %d disagrees with its counter", i)
				}
				if set {
					ones++
				}
			}
			if ones != c.Filter().Ones() {
				t.Fatalf("view Ones %d, counted %d", c.Filter().Ones(), ones)
			}
			// The decoded filter is usable: an add and a remove are inverse
			// unless saturation intervenes, and nothing panics.
			c.Add("/after/decode")
			if !c.Test("/after/decode") || !c.Remove("/after/decode") {
				t.Fatal("decoded counting filter is not usable")
			}
		}
	})
}

func FuzzDecodeIDBFA(f *testing.F) {
	for _, g := range fuzzGeometries[:2] {
		x := NewIDBFA(g)
		f.Add(x.AppendBinary(nil))
		for i, m := range []string{"a", "b", "c"} {
			_ = x.AddMember(m)
			for _, o := range fuzzPaths(i + 1) {
				_ = x.Assign(m, o)
			}
		}
		f.Add(x.AppendBinary(nil))
	}
	f.Add([]byte{})
	f.Add([]byte("GHBI"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, b := range fuzzInputs(data) {
			x, err := DecodeIDBFA(b)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error %v does not wrap ErrCorrupt", err)
				}
				continue
			}
			if !bytes.Equal(x.AppendBinary(nil), b) {
				t.Fatal("decoded IDBFA re-encodes differently")
			}
			ms := x.Members()
			for i := 1; i < len(ms); i++ {
				if ms[i-1] >= ms[i] {
					t.Fatalf("members %q, %q out of order", ms[i-1], ms[i])
				}
			}
			r := x.Lookup("/f/0")
			if r.Positives > len(ms) || (r.Hit() != (r.ID != "")) {
				t.Fatalf("Lookup = %+v with %d members", r, len(ms))
			}
			if len(ms) > 0 {
				if err := x.Assign(ms[0], "/new"); err != nil {
					t.Fatal(err)
				}
				if err := x.Unassign(ms[0], "/new"); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}
