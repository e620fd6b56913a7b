package rpc

import (
	"bytes"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

// The reflection codec's view of the hand-encoded bodies: the same fields
// and tags, without the methods.
type (
	plainStat   StatResponse
	plainResult struct {
		Stat    *plainStat `json:"stat,omitempty"`
		Code    Code       `json:"code,omitempty"`
		Message string     `json:"message,omitempty"`
		Skipped bool       `json:"skipped,omitempty"`
	}
	plainBatch struct {
		Results []plainResult `json:"results"`
	}
)

func toPlain(r *BatchStatResponse) *plainBatch {
	out := &plainBatch{}
	if r.Results != nil {
		out.Results = []plainResult{}
	}
	for _, x := range r.Results {
		p := plainResult{Code: x.Code, Message: x.Message, Skipped: x.Skipped}
		if x.Stat != nil {
			st := plainStat(*x.Stat)
			p.Stat = &st
		}
		out.Results = append(out.Results, p)
	}
	return out
}

func statSamples() map[string]*StatResponse {
	return map[string]*StatResponse{
		"zero": {},
		"file": {Inode: Inode{Path: "/a/b.go", Type: TypeFile, Mode: 0o644, UID: 1000, GID: 1000, Size: 1234,
			Atime: 1e18, Mtime: 1e18 + 1, Ctime: 1e18 + 2, Nlink: 1, Version: 3, Home: "node2", ID: 4097},
			HomeAddr: "127.0.0.1:7420", Level: LevelL1, Lease: 2e9},
		"every field": {Inode: Inode{Path: "/" + strings.Repeat("p", 300), Type: TypeSymlink, Mode: 0o7777,
			UID: math.MaxUint32, GID: 70000, Size: math.MaxInt64, Atime: -1, Mtime: -200, Ctime: math.MinInt64,
			Nlink: 300, Version: math.MaxUint64, Home: "n", Layout: []byte{0, 1, 2, 255}, Target: "/t", Rdev: 0x803, HasText: true,
			Text: "some text", Ancestors: []AncestorCode{{Depth: 0, Mode: 0o111, UID: 1}, {Depth: 1, Mode: 0o100, UID: 2, GID: 3}},
			ID: math.MaxUint64 - 1, Xattrs: []Xattr{{Name: "user.a", Value: []byte("v")}, {Name: "user.b", Value: []byte{0, 255}}}, Anchor: "node3"},
			HomeAddr: "h:1", Level: LevelL4, Hops: 3, Lease: -5},
		"long strings": {Inode: Inode{Path: "/" + strings.Repeat("x", 70000), Type: "other type", Home: strings.Repeat("h", 40),
			Layout: bytes.Repeat([]byte{7}, 70000)}, Level: "L9", Hops: -40},
		"int bounds": {Inode: Inode{Mode: 127, UID: 128, GID: 255, Size: 256, Atime: 32767, Mtime: 32768, Ctime: -33,
			Nlink: 65535, Version: 65536}, Hops: -129, Lease: math.MinInt32},
	}
}

// TestStatCodec: the hand-written encodings are byte for byte the
// reflection codec's, and each reads the other's.
func TestStatCodec(t *testing.T) {
	bc := NewCodec()
	reflected := func(v any) []byte {
		t.Helper()
		e := bc.GetEncoder()
		b, err := e.Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(b)
	}
	for name, st := range statSamples() {
		t.Run(name, func(t *testing.T) {
			fast := reflected(st)
			plain := plainStat(*st)
			if slow := reflected(&plain); !bytes.Equal(fast, slow) {
				t.Fatalf("encodings differ:\nfast %x\nslow %x", fast, slow)
			}
			var got StatResponse
			if err := bc.Unmarshal(fast, &got); err != nil {
				t.Fatal(err)
			}
			var back plainStat
			if err := bc.Unmarshal(fast, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, *st) || !reflect.DeepEqual(StatResponse(back), got) {
				t.Errorf("decoded\nfast %+v\nslow %+v\nwant %+v", got, back, *st)
			}
		})
	}

	batches := map[string]*BatchStatResponse{
		"nil":   {},
		"empty": {Results: []BatchStatResult{}},
		"mixed": {Results: []BatchStatResult{
			{Stat: statSamples()["file"]}, {Code: CodeNotExist, Message: "not found"}, {Skipped: true},
			{Stat: statSamples()["every field"]}, {Stat: statSamples()["file"]}, {}}},
	}
	for name, br := range batches {
		t.Run("batch "+name, func(t *testing.T) {
			fast := reflected(br)
			if slow := reflected(toPlain(br)); !bytes.Equal(fast, slow) {
				t.Fatalf("encodings differ:\nfast %x\nslow %x", fast, slow)
			}
			var got BatchStatResponse
			if err := bc.Unmarshal(fast, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&got, br) {
				t.Errorf("decoded %+v, want %+v", got, br)
			}
		})
	}
}

// TestStatCodecEveryField: the "every field" sample sets every field of
// StatResponse and its Inode, so a field added to either without a line in
// statcodec.go fails TestStatCodec (the hand Encoder would leave it out).
func TestStatCodecEveryField(t *testing.T) {
	st := statSamples()["every field"]
	var zero func(v reflect.Value, name string)
	zero = func(v reflect.Value, name string) {
		for i := range v.NumField() {
			f, sf := v.Field(i), v.Type().Field(i)
			if sf.Anonymous || sf.Type.Kind() == reflect.Struct {
				zero(f, name+"."+sf.Name)
				continue
			}
			if f.IsZero() {
				t.Errorf("%s.%s is zero in the \"every field\" sample: set it, and encode it in statcodec.go", name, sf.Name)
			}
		}
	}
	zero(reflect.ValueOf(st).Elem(), "StatResponse")
}

// TestStatCodecUnknownKeys: keys a newer peer may add are skipped,
// whatever their type.
func TestStatCodecUnknownKeys(t *testing.T) {
	type newerStat struct {
		Path    string            `json:"path"`
		Extra   map[string][]any  `json:"extra"`
		Float   float64           `json:"float"`
		Bin     []byte            `json:"bin"`
		Neg     int64             `json:"neg"`
		Nested  []map[string]uint `json:"nested"`
		Level   string            `json:"level"`
		Nothing *int              `json:"nothing"`
	}
	type newerResult struct {
		Stat  *newerStat `json:"stat"`
		Extra []string   `json:"extra"`
	}
	type newerBatch struct {
		Before  map[string]int `json:"before"`
		Results []newerResult  `json:"results"`
	}
	bc := NewCodec()
	v := newerStat{Path: "/p", Extra: map[string][]any{"a": {1, "x", true, -3.5}}, Float: 1.5, Bin: []byte("bin"),
		Neg: -100000, Nested: []map[string]uint{{"k": 1 << 40}}, Level: LevelL2}
	frame, err := bc.GetEncoder().Encode(&newerBatch{Before: map[string]int{"x": 1}, Results: []newerResult{{Stat: &v, Extra: []string{"e"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var got BatchStatResponse
	if err := bc.Unmarshal(frame, &got); err != nil {
		t.Fatal(err)
	}
	want := &BatchStatResponse{Results: []BatchStatResult{{Stat: &StatResponse{Inode: Inode{Path: "/p"}, Level: LevelL2}}}}
	if !reflect.DeepEqual(&got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestStatCodecMalformed: truncated or mistyped input is an error, never a
// panic or a value read past the frame.
func TestStatCodecMalformed(t *testing.T) {
	bc := NewCodec()
	full := &BatchStatResponse{Results: []BatchStatResult{{Stat: statSamples()["every field"]}, {Code: 3, Message: "m"}}}
	frame, err := bc.GetEncoder().Encode(full)
	if err != nil {
		t.Fatal(err)
	}
	frame = bytes.Clone(frame)
	for n := range len(frame) {
		var got BatchStatResponse
		if err := bc.Unmarshal(frame[:n], &got); err == nil {
			t.Fatalf("%d of %d bytes: no error", n, len(frame))
		}
	}
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"trailing byte", append(bytes.Clone(frame), 0)},
		{"not a map", []byte{0x01}},
		{"path as an int", append(appendStr(appendMapLen(nil, 1), "path"), 5)},
		{"mode as a string", appendStr(appendStr(appendMapLen(nil, 1), "mode"), "x")},
		{"mode too large", appendUint(appendStr(appendMapLen(nil, 1), "mode"), 1<<40)},
		{"huge ancestor count", binary32(appendStr(appendMapLen(nil, 1), "ancestors"), mpArray32, math.MaxUint32)},
		{"huge map in an unknown key", binary32(appendStr(appendMapLen(nil, 1), "x"), mpMap32, math.MaxUint32)},
		{"unknown type", append(appendStr(appendMapLen(nil, 1), "x"), 0xc1)},
	} {
		var got StatResponse
		if err := bc.Unmarshal(tc.frame, &got); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

func binary32(b []byte, c byte, n uint32) []byte {
	return append(b, c, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// BenchmarkStatCodec encodes and decodes a batch of 16 inodes (a prefetch
// group's answer), by hand and by reflection.
func BenchmarkStatCodec(b *testing.B) {
	bc := NewCodec()
	br := &BatchStatResponse{}
	for i := range 16 {
		st := *statSamples()["file"]
		st.Path = fmt.Sprintf("/src/ghba/routing/workload/file-%d.go", i)
		br.Results = append(br.Results, BatchStatResult{Stat: &st})
	}
	for _, tc := range []struct {
		name     string
		enc, dec any
	}{
		{"hand", br, new(BatchStatResponse)},
		{"reflection", toPlain(br), new(plainBatch)},
	} {
		e := bc.GetEncoder()
		frame, err := e.Encode(tc.enc)
		if err != nil {
			b.Fatal(err)
		}
		frame = bytes.Clone(frame)
		b.Run(tc.name+"/encode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Encode(tc.enc); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/decode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.Unmarshal(frame, tc.dec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
