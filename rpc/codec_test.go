package rpc

import (
	"bytes"
	"strings"
	"testing"
)

// TestBytes: a Bytes field carries every size a []byte field does, reads
// what a []byte field (or a str) wrote and is read by one, and refuses a
// value that is not bytes.
func TestBytes(t *testing.T) {
	bc := newBodyCodec()
	type withBytes struct {
		Data Bytes `json:"data"`
		N    int   `json:"n"`
	}
	type withSlice struct {
		Data []byte `json:"data"`
		N    int    `json:"n"`
	}
	type withString struct {
		Data string `json:"data"`
		N    int    `json:"n"`
	}
	encode := func(v any) []byte {
		t.Helper()
		b, err := bc.getEncoder().encode(v)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(b)
	}
	payload := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i * 7)
		}
		return b
	}
	// Sizes at the bounds of bin8, bin16 and bin32, and a filter's size.
	for _, n := range []int{0, 1, 31, 32, 255, 256, 65535, 65536, 1 << 20} {
		want := payload(n)
		for name, frame := range map[string][]byte{
			"Bytes":  encode(&withBytes{Data: want, N: 7}),
			"[]byte": encode(&withSlice{Data: want, N: 7}),
			"string": encode(&withString{Data: string(want), N: 7}),
		} {
			var got withBytes
			if err := bc.unmarshal(frame, &got); err != nil {
				t.Fatalf("%d bytes written as %s: %v", n, name, err)
			}
			if !bytes.Equal(got.Data, want) || got.N != 7 {
				t.Fatalf("%d bytes written as %s: read %d bytes, n %d", n, name, len(got.Data), got.N)
			}
		}
		var old withSlice
		if err := bc.unmarshal(encode(&withBytes{Data: want, N: 7}), &old); err != nil || !bytes.Equal(old.Data, want) {
			t.Fatalf("%d bytes read as []byte: %d bytes, %v", n, len(old.Data), err)
		}
	}

	// The decoded value is a copy: reusing the frame leaves it alone.
	frame := encode(&withBytes{Data: []byte("abc")})
	var got withBytes
	if err := bc.unmarshal(frame, &got); err != nil {
		t.Fatal(err)
	}
	clear(frame)
	if string(got.Data) != "abc" {
		t.Errorf("decoded bytes alias the frame: %q", got.Data)
	}

	// Nil stays nil.
	got = withBytes{}
	if err := bc.unmarshal(encode(&withBytes{}), &got); err != nil || got.Data != nil {
		t.Errorf("nil: %v, %v", got.Data, err)
	}

	// A value of another type is refused.
	type withInt struct {
		Data int `json:"data"`
	}
	err := bc.unmarshal(encode(&withInt{Data: 5}), &got)
	if err == nil || !strings.Contains(err.Error(), "not bin or str") {
		t.Errorf("an int as bytes: %v", err)
	}
}

// BenchmarkDecodeFilter decodes a frame carrying a 1 MiB filter (what a
// full filter pull or a client's filter refresh brings).
func BenchmarkDecodeFilter(b *testing.B) {
	bc := newBodyCodec()
	frame, err := bc.getEncoder().encode(&ShardFilter{Data: make(Bytes, 1<<20)})
	if err != nil {
		b.Fatal(err)
	}
	frame = bytes.Clone(frame)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		var v ShardFilter
		if err := bc.unmarshal(frame, &v); err != nil {
			b.Fatal(err)
		}
	}
}
