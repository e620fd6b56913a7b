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
	bc := NewCodec()
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
		b, err := bc.GetEncoder().Encode(v)
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
			if err := bc.Unmarshal(frame, &got); err != nil {
				t.Fatalf("%d bytes written as %s: %v", n, name, err)
			}
			if !bytes.Equal(got.Data, want) || got.N != 7 {
				t.Fatalf("%d bytes written as %s: read %d bytes, n %d", n, name, len(got.Data), got.N)
			}
		}
		var old withSlice
		if err := bc.Unmarshal(encode(&withBytes{Data: want, N: 7}), &old); err != nil || !bytes.Equal(old.Data, want) {
			t.Fatalf("%d bytes read as []byte: %d bytes, %v", n, len(old.Data), err)
		}
	}

	// The decoded value is a copy: reusing the frame leaves it alone.
	frame := encode(&withBytes{Data: []byte("abc")})
	var got withBytes
	if err := bc.Unmarshal(frame, &got); err != nil {
		t.Fatal(err)
	}
	clear(frame)
	if string(got.Data) != "abc" {
		t.Errorf("decoded bytes alias the frame: %q", got.Data)
	}

	// Nil stays nil.
	got = withBytes{}
	if err := bc.Unmarshal(encode(&withBytes{}), &got); err != nil || got.Data != nil {
		t.Errorf("nil: %v, %v", got.Data, err)
	}

	// A value of another type is refused.
	type withInt struct {
		Data int `json:"data"`
	}
	err := bc.Unmarshal(encode(&withInt{Data: 5}), &got)
	if err == nil || !strings.Contains(err.Error(), "not bin or str") {
		t.Errorf("an int as bytes: %v", err)
	}
}

// BenchmarkDecodeFilter decodes a frame carrying a 1 MiB filter (what a
// full filter pull or a client's filter refresh brings).
func BenchmarkDecodeFilter(b *testing.B) {
	bc := NewCodec()
	frame, err := bc.GetEncoder().Encode(&ShardFilter{Data: make(Bytes, 1<<20)})
	if err != nil {
		b.Fatal(err)
	}
	frame = bytes.Clone(frame)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		var v ShardFilter
		if err := bc.Unmarshal(frame, &v); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzBodyDecoder decodes arbitrary bytes into the message types: errors
// are fine, panics and runaway allocations are not.
func FuzzBodyDecoder(f *testing.F) {
	bc := NewCodec()
	for _, v := range []any{&StatResponse{Inode: Inode{Path: "/a"}}, &BatchStatRequest{Paths: []string{"/a", "/b"}},
		&MembersResponse{Members: []Member{{ID: "n1"}}}, &GroupsResponse{Groups: []GroupInfo{{Replicas: map[string]int{"a": 1}}}},
		&FiltersResponse{Filters: []ShardFilter{{FilterVersion: FilterVersion{Shard: "n1", Term: 2}, Data: []byte{1, 2}}}},
		&KeyringResponse{Keys: map[string]int{"k": 3}, Messages: map[string]string{"n1": "ok"}}} {
		b, _ := bc.GetEncoder().Encode(v)
		f.Add(append([]byte(nil), b...))
	}
	f.Add([]byte{0xdd, 0x7f, 0xff, 0xff, 0xff}) // array32 of 2^31 elements
	f.Add([]byte{0xdf, 0x7f, 0xff, 0xff, 0xff}) // map32 of 2^31 entries
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, v := range []any{&StatResponse{}, &BatchStatRequest{}, &BatchStatResponse{}, &MembersResponse{},
			&GroupsResponse{}, &ReadDirResponse{}, &SetAttrRequest{}, &FiltersRequest{}, &FiltersResponse{},
			&KeyringRequest{}, &KeyringResponse{}} {
			_ = bc.Unmarshal(data, v)
		}
	})
}
