package contents

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"testing"
)

func ext(first, count, gen uint64) Extent { return Extent{First: first, Count: count, Gen: gen} }

func TestLayoutRoundTrip(t *testing.T) {
	for _, l := range []Layout{
		{},
		{BlockSize: DefaultBlockSize},
		{BlockSize: 1},
		{BlockSize: MaxBlockSize, Extents: []Extent{ext(0, 1, 1)}},
		{BlockSize: 4096, Extents: []Extent{ext(0, 256, 0xdeadbeefcafef00d)}},
		{BlockSize: 4096, Extents: []Extent{ext(3, 2, 7), ext(5, 1, 8), ext(100, 1<<20, math.MaxUint64)}},
		{BlockSize: DefaultBlockSize, Extents: []Extent{ext(math.MaxInt64/DefaultBlockSize-1, 1, 9)}},
	} {
		got, err := DecodeLayout(l.Encode())
		if err != nil {
			t.Fatalf("%+v: %v", l, err)
		}
		if !reflect.DeepEqual(got, l) {
			t.Fatalf("round trip of %+v gave %+v", l, got)
		}
	}
	// A sequentially written file of any size is one extent: a few bytes.
	if n := len((Layout{BlockSize: DefaultBlockSize, Extents: []Extent{ext(0, 1<<18, 12345)}}).Encode()); n > 20 {
		t.Fatalf("a 1 TiB one-extent layout encodes in %d bytes", n)
	}
}

func TestDecodeLayoutEmpty(t *testing.T) {
	for _, b := range [][]byte{nil, {}} {
		l, err := DecodeLayout(b)
		if err != nil || l.BlockSize != DefaultBlockSize || len(l.Extents) != 0 {
			t.Fatalf("DecodeLayout(%v) = %+v, %v", b, l, err)
		}
	}
}

func TestDecodeLayoutErrors(t *testing.T) {
	valid := Layout{BlockSize: 4096, Extents: []Extent{ext(1, 2, 3)}}.Encode()
	for name, b := range map[string][]byte{
		"version":       {2, 0, 0},
		"no size":       {1},
		"no count":      {1, 0x80, 0x20},
		"big block":     append([]byte{1}, 0x81, 0x80, 0x80, 0x80, 0x04, 0),
		"count lies":    {1, 0, 5, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0},
		"huge count":    {1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"zero count":    {1, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0},
		"zero gen":      {1, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
		"short gen":     []byte{1, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0}[:12],
		"truncated":     valid[:len(valid)-1],
		"trailing":      append(slices.Clone(valid), 0),
		"overflow":      {1, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1, 1, 0, 0, 0, 0, 0, 0, 0},
		"past MaxInt64": Layout{BlockSize: DefaultBlockSize, Extents: []Extent{ext(math.MaxInt64/DefaultBlockSize, 1, 1)}}.Encode(),
	} {
		if l, err := DecodeLayout(b); !errors.Is(err, ErrCorruptLayout) {
			t.Errorf("%s: DecodeLayout(%x) = %+v, %v; want ErrCorruptLayout", name, b, l, err)
		}
	}
}

func TestLayoutSetGen(t *testing.T) {
	for _, tc := range []struct {
		name       string
		in         []Extent
		block, gen uint64
		want       []Extent
	}{
		{"empty", nil, 5, 1, []Extent{ext(5, 1, 1)}},
		{"append joins", []Extent{ext(0, 3, 1)}, 3, 1, []Extent{ext(0, 4, 1)}},
		{"prepend joins", []Extent{ext(1, 3, 1)}, 0, 1, []Extent{ext(0, 4, 1)}},
		{"fill gap joins both", []Extent{ext(0, 2, 1), ext(3, 2, 1)}, 2, 1, []Extent{ext(0, 5, 1)}},
		{"fill gap other gen", []Extent{ext(0, 2, 1), ext(3, 2, 1)}, 2, 2, []Extent{ext(0, 2, 1), ext(2, 1, 2), ext(3, 2, 1)}},
		{"same gen no-op", []Extent{ext(0, 4, 1)}, 2, 1, []Extent{ext(0, 4, 1)}},
		{"split middle", []Extent{ext(0, 5, 1)}, 2, 2, []Extent{ext(0, 2, 1), ext(2, 1, 2), ext(3, 2, 1)}},
		{"split first", []Extent{ext(0, 5, 1)}, 0, 2, []Extent{ext(0, 1, 2), ext(1, 4, 1)}},
		{"split last", []Extent{ext(0, 5, 1)}, 4, 2, []Extent{ext(0, 4, 1), ext(4, 1, 2)}},
		{"split last joins next", []Extent{ext(0, 5, 1), ext(5, 2, 2)}, 4, 2, []Extent{ext(0, 4, 1), ext(4, 3, 2)}},
		{"split first joins prev", []Extent{ext(0, 2, 2), ext(2, 3, 1)}, 2, 2, []Extent{ext(0, 3, 2), ext(3, 2, 1)}},
		{"single replaced", []Extent{ext(0, 1, 1), ext(1, 1, 2), ext(2, 1, 1)}, 1, 1, []Extent{ext(0, 3, 1)}},
		{"far away", []Extent{ext(0, 1, 1)}, 1000, 1, []Extent{ext(0, 1, 1), ext(1000, 1, 1)}},
		{"before all", []Extent{ext(10, 1, 1)}, 3, 2, []Extent{ext(3, 1, 2), ext(10, 1, 1)}},
	} {
		l := Layout{BlockSize: 4096, Extents: slices.Clone(tc.in)}
		l.Set(tc.block, tc.gen)
		if !slices.Equal(l.Extents, tc.want) {
			t.Errorf("%s: Set(%d, %d) on %v = %v, want %v", tc.name, tc.block, tc.gen, tc.in, l.Extents, tc.want)
		}
		if g, ok := l.Gen(tc.block); !ok || g != tc.gen {
			t.Errorf("%s: Gen(%d) = %d, %v", tc.name, tc.block, g, ok)
		}
	}
	l := Layout{Extents: []Extent{ext(2, 3, 7)}}
	for b, want := range map[uint64]uint64{0: 0, 1: 0, 2: 7, 4: 7, 5: 0} {
		if g, ok := l.Gen(b); g != want || ok != (want != 0) {
			t.Errorf("Gen(%d) = %d, %v; want %d", b, g, ok, want)
		}
	}
}

// TestLayoutSetModel checks Set and Gen against a map under random use.
func TestLayoutSetModel(t *testing.T) {
	r := newTestRand(1)
	l := Layout{BlockSize: 1}
	model := map[uint64]uint64{}
	for i := 0; i < 5000; i++ {
		prev := l.Clone()
		b, g := r.Uint64N(64), 1+r.Uint64N(3)
		l.Set(b, g)
		model[b] = g
		if i%7 == 0 {
			size := int64(r.Uint64N(70))
			l.Truncate(size)
			for k := range model {
				if int64(k) >= size {
					delete(model, k)
				}
			}
		}
		for k := uint64(0); k < 70; k++ {
			g, ok := l.Gen(k)
			if mg, mok := model[k]; g != mg || ok != mok {
				t.Fatalf("step %d: Gen(%d) = %d, %v; model %d, %v (%v)", i, k, g, ok, mg, mok, l.Extents)
			}
		}
		var dropped []BlockRef // by brute force
		for _, ref := range prev.Refs() {
			if g, ok := l.Gen(ref.Block); !ok || g != ref.Gen {
				dropped = append(dropped, ref)
			}
		}
		if got := Dropped(prev, l); !slices.Equal(got, dropped) {
			t.Fatalf("step %d: Dropped(%v, %v) = %v, want %v", i, prev.Extents, l.Extents, got, dropped)
		}
		for j := 1; j < len(l.Extents); j++ {
			p, e := l.Extents[j-1], l.Extents[j]
			if p.First+p.Count > e.First || (p.First+p.Count == e.First && p.Gen == e.Gen) || e.Count == 0 {
				t.Fatalf("step %d: extents not sorted, apart and joined: %v", i, l.Extents)
			}
		}
	}
}

func TestLayoutTruncate(t *testing.T) {
	in := []Extent{ext(0, 2, 1), ext(2, 3, 2), ext(8, 2, 3)}
	for _, tc := range []struct {
		size int64
		want []Extent
	}{
		{0, nil},
		{1, []Extent{ext(0, 1, 1)}},
		{100, []Extent{ext(0, 1, 1)}},
		{101, []Extent{ext(0, 2, 1)}},
		{300, []Extent{ext(0, 2, 1), ext(2, 1, 2)}},
		{301, []Extent{ext(0, 2, 1), ext(2, 2, 2)}},
		{500, []Extent{ext(0, 2, 1), ext(2, 3, 2)}},
		{850, []Extent{ext(0, 2, 1), ext(2, 3, 2), ext(8, 1, 3)}},
		{1000, in},
		{5000, in},
		{-1, nil},
	} {
		l := Layout{BlockSize: 100, Extents: slices.Clone(in)}
		l.Truncate(tc.size)
		if !slices.Equal(l.Extents, tc.want) {
			t.Errorf("Truncate(%d) = %v, want %v", tc.size, l.Extents, tc.want)
		}
	}
}

func TestDropped(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, new []Extent
		want     []BlockRef
	}{
		{"same", []Extent{ext(0, 3, 1)}, []Extent{ext(0, 3, 1)}, nil},
		{"all gone", []Extent{ext(0, 2, 1)}, nil, []BlockRef{{0, 1}, {1, 1}}},
		{"one rewritten", []Extent{ext(0, 3, 1)}, []Extent{ext(0, 1, 1), ext(1, 1, 2), ext(2, 1, 1)}, []BlockRef{{1, 1}}},
		{"truncated", []Extent{ext(0, 4, 1), ext(9, 1, 5)}, []Extent{ext(0, 2, 1)}, []BlockRef{{2, 1}, {3, 1}, {9, 5}}},
		{"new blocks only", []Extent{ext(2, 1, 1)}, []Extent{ext(0, 5, 1)}, nil},
		{"regenerated", []Extent{ext(0, 2, 1)}, []Extent{ext(0, 2, 2)}, []BlockRef{{0, 1}, {1, 1}}},
		{"empty old", nil, []Extent{ext(0, 2, 2)}, nil},
		{"new spans two old", []Extent{ext(0, 2, 1), ext(2, 2, 2), ext(6, 1, 1)}, []Extent{ext(1, 6, 1)},
			[]BlockRef{{0, 1}, {2, 2}, {3, 2}}},
		{"holes in new", []Extent{ext(0, 6, 1)}, []Extent{ext(1, 1, 1), ext(3, 1, 1)}, []BlockRef{{0, 1}, {2, 1}, {4, 1}, {5, 1}}},
	} {
		got := Dropped(Layout{Extents: tc.old}, Layout{Extents: tc.new})
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: Dropped = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMerge(t *testing.T) {
	cur := Layout{BlockSize: 100, Extents: []Extent{ext(0, 4, 1)}}
	for _, tc := range []struct {
		name     string
		curSize  int64
		c        *Commit
		want     []Extent
		wantSize int64
	}{
		{"nil", 400, nil, []Extent{ext(0, 4, 1)}, 400},
		{"blocks", 400, &Commit{Blocks: map[uint64]uint64{1: 2, 5: 2}, Size: 600}, []Extent{ext(0, 1, 1), ext(1, 1, 2), ext(2, 2, 1), ext(5, 1, 2)}, 600},
		{"smaller size keeps larger", 400, &Commit{Blocks: map[uint64]uint64{0: 2}, Size: 50}, []Extent{ext(0, 1, 2), ext(1, 3, 1)}, 400},
		{"truncate then write", 400, &Commit{Blocks: map[uint64]uint64{1: 3}, Truncated: true, TruncSize: 150, Size: 180},
			[]Extent{ext(0, 1, 1), ext(1, 1, 3)}, 180},
		{"truncate to zero", 400, &Commit{Truncated: true, Size: 0}, nil, 0},
		{"truncate up", 400, &Commit{Truncated: true, TruncSize: 1000, Size: 1000}, []Extent{ext(0, 4, 1)}, 1000},
	} {
		gotL, gotSize := Merge(cur, tc.curSize, tc.c)
		if !slices.Equal(gotL.Extents, tc.want) || gotSize != tc.wantSize || gotL.BlockSize != 100 {
			t.Errorf("%s: Merge = %+v, %d; want %v, %d", tc.name, gotL, gotSize, tc.want, tc.wantSize)
		}
	}
	if !slices.Equal(cur.Extents, []Extent{ext(0, 4, 1)}) {
		t.Fatalf("Merge modified its input: %v", cur.Extents)
	}
}

func TestKey(t *testing.T) {
	for _, tc := range []struct {
		ino uint64
		r   BlockRef
	}{{0, BlockRef{0, 1}}, {0xabc, BlockRef{12, 0xdeadbeef}}, {math.MaxUint64, BlockRef{math.MaxUint64, math.MaxUint64}}} {
		k := Key(tc.ino, tc.r)
		ino, r, err := ParseKey(k)
		if err != nil || ino != tc.ino || r != tc.r {
			t.Errorf("ParseKey(%q) = %x, %v, %v", k, ino, r, err)
		}
	}
	if k := Key(0xabc, BlockRef{12, 0xdeadbeef}); k != "blocks/0000000000000abc/12-00000000deadbeef" {
		t.Errorf("Key = %q", k)
	}
	if p := InodePrefix(0xabc); p != "blocks/0000000000000abc/" {
		t.Errorf("InodePrefix = %q", p)
	}
	for _, k := range []string{
		"", "blocks/", "blocks/0000000000000abc/12", "blocks/0000000000000abc/12-00000000deadbee",
		"blocks/0000000000000ABC/12-00000000deadbeef", "blocks/0000000000000abc/012-00000000deadbeef",
		"blocks/0000000000000abc/+12-00000000deadbeef", "blocks/0000000000000abc/-00000000deadbeef",
		"check/0000000000000abc/12-00000000deadbeef", "blocks/0000000000000abc/12-00000000deadbeef/x",
		"blocks/0000000000000abc/99999999999999999999-00000000deadbeef",
	} {
		if _, _, err := ParseKey(k); !errors.Is(err, ErrBadKey) {
			t.Errorf("ParseKey(%q) = %v, want ErrBadKey", k, err)
		}
	}
}

func FuzzDecodeLayout(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0})
	f.Add(Layout{BlockSize: 4096, Extents: []Extent{ext(3, 2, 7), ext(5, 1, 8)}}.Encode())
	f.Add(Layout{BlockSize: DefaultBlockSize, Extents: []Extent{ext(0, 1<<18, 99)}}.Encode())
	f.Add([]byte{1, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := DecodeLayout(b)
		if err != nil {
			if !errors.Is(err, ErrCorruptLayout) {
				t.Fatalf("error %v does not wrap ErrCorruptLayout", err)
			}
			return
		}
		var end uint64
		for i, e := range l.Extents {
			if e.Count == 0 || e.Gen == 0 || (i > 0 && e.First < end) {
				t.Fatalf("decoded an invalid layout %+v", l)
			}
			end = e.First + e.Count
			if end > uint64(math.MaxInt64/l.BlockLen()) {
				t.Fatalf("decoded blocks past the largest file: %+v", l)
			}
		}
		again, err := DecodeLayout(l.Encode())
		if err != nil || !reflect.DeepEqual(again, l) {
			t.Fatalf("re-encoding %+v decoded to %+v, %v", l, again, err)
		}
		// Using a decoded layout never panics either.
		l.Set(end, 1)
		l.Truncate(int64(end/2) * l.BlockLen())
		if again.Blocks() < 1<<20 {
			_ = Dropped(again, l)
		}
	})
}
