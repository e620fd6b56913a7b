package rpc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
)

func TestFrameHeadersRoundTrip(t *testing.T) {
	body := []byte("body-bytes")
	b := appendRequestHeader(nil, len(body), 42, 1234567, "Namespace.Stat")
	b = append(b, body...)
	var hdr [frameLenSize]byte
	var pool bufPool
	p, err := readFrame(bytes.NewReader(b), &hdr, 1<<20, &pool)
	if err != nil {
		t.Fatal(err)
	}
	h, err := parseRequest(*p)
	if err != nil || h.seq != 42 || h.timeout != 1234567 || string(h.method) != "Namespace.Stat" || !bytes.Equal(h.body, body) {
		t.Fatalf("request %+v %v", h, err)
	}

	long := string(bytes.Repeat([]byte("m"), maxMessageLen+10))
	b = appendResponseHeader(nil, len(body), 7, CodeNotEmpty, long)
	b = append(b, body...)
	p, err = readFrame(bytes.NewReader(b), &hdr, 1<<20, &pool)
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseResponse(*p)
	if err != nil || r.seq != 7 || r.code != CodeNotEmpty || len(r.msg) != maxMessageLen || !bytes.Equal(r.body, body) {
		t.Fatalf("response seq=%d code=%v msglen=%d %v", r.seq, r.code, len(r.msg), err)
	}

	for _, tok := range []string{"t", "bearer-token", string(bytes.Repeat([]byte{'x'}, MaxTokenLen))} {
		p, err = readFrame(bytes.NewReader(appendAuth(nil, tok)), &hdr, 1<<20, &pool)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := parseAuth(*p); err != nil || string(got) != tok {
			t.Errorf("auth %q: %q %v", tok, got, err)
		}
	}
	for _, bad := range [][]byte{{kindAuth}, append([]byte{kindAuth}, make([]byte, MaxTokenLen+1)...), {kindCancel, 'x'}, nil} {
		if _, err := parseAuth(bad); !errors.Is(err, ErrProtocol) {
			t.Errorf("auth frame of %d bytes: %v, want ErrProtocol", len(bad), err)
		}
	}

	for _, kind := range []byte{kindCancel, kindGoAway} {
		b = appendControl(nil, kind, 99)
		p, err = readFrame(bytes.NewReader(b), &hdr, 1<<20, &pool)
		if err != nil {
			t.Fatal(err)
		}
		if seq, err := parseControl(*p, kind); err != nil || seq != 99 {
			t.Errorf("control %d: %d %v", kind, seq, err)
		}
	}
}

func TestReadFrameLimits(t *testing.T) {
	var hdr [frameLenSize]byte
	var pool bufPool
	frame := func(n uint32, payload []byte) io.Reader {
		return bytes.NewReader(append(binary.BigEndian.AppendUint32(nil, n), payload...))
	}
	tests := []struct {
		name string
		r    io.Reader
		max  int
		want error
	}{
		{"over max", frame(1025, nil), 1024, ErrFrameTooLarge},
		{"huge", frame(0xffffffff, nil), DefaultMaxFrameSize, ErrFrameTooLarge},
		{"empty", frame(0, nil), 1024, ErrProtocol},
		{"truncated small", frame(100, []byte("abc")), 1024, io.ErrUnexpectedEOF},
		{"truncated large", frame(1<<20, []byte("abc")), 2 << 20, io.ErrUnexpectedEOF},
		{"no length", bytes.NewReader([]byte{1, 2}), 1024, io.ErrUnexpectedEOF},
		{"eof", bytes.NewReader(nil), 1024, io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readFrame(tt.r, &hdr, tt.max, &pool)
			if !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
	// A large frame that arrives whole is read whole.
	payload := bytes.Repeat([]byte{7}, 300<<10)
	p, err := readFrame(frame(uint32(len(payload)), payload), &hdr, 1<<20, &pool)
	if err != nil || !bytes.Equal(*p, payload) {
		t.Fatalf("large frame: %v", err)
	}
}

// TestReadFrameAllocatesOnlyWhatArrives: a peer announcing a 60 MiB frame
// and sending 10 bytes must not make the reader allocate 60 MiB.
func TestReadFrameAllocatesOnlyWhatArrives(t *testing.T) {
	var hdr [frameLenSize]byte
	var pool bufPool
	in := append(binary.BigEndian.AppendUint32(nil, 60<<20), []byte("0123456789")...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := readFrame(bytes.NewReader(in), &hdr, DefaultMaxFrameSize, &pool)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v", err)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
		t.Errorf("allocated %d bytes for a 10-byte partial frame", d)
	}
}

// FuzzFrameDecoder feeds arbitrary bytes to the frame reader and header
// parsers, as a server and a client would see them. Nothing may panic,
// parsed slices must lie within the frame, and a parsed request must
// re-encode to the same bytes.
func FuzzFrameDecoder(f *testing.F) {
	f.Add(appendRequestHeader(nil, 0, 1, 0, "A.B"))
	f.Add(append(appendRequestHeader(nil, 3, 9, 1e9, "Namespace.Stat"), 0x81, 0xa1, 'x'))
	f.Add(appendResponseHeader(nil, 0, 1, CodeExist, "exists"))
	f.Add(appendControl(nil, kindCancel, 5))
	f.Add(appendControl(nil, kindGoAway, 5))
	f.Add(appendAuth(nil, "token"))
	f.Add(appendControl(nil, kindNotifyAck, 3))
	f.Add(append(binary.BigEndian.AppendUint32(nil, controlFrameLen+3), append([]byte{kindNotify, 0, 0, 0, 0, 0, 0, 0, 1}, 0x81, 0xa1, 'p')...))
	f.Add(appendAuth(nil, string(bytes.Repeat([]byte{'t'}, MaxTokenLen+1))))
	f.Add([]byte{0, 0, 0, 1, kindAuth})
	f.Add([]byte{0, 0, 0, 1, 0xff})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte("GHB\x01garbage"))
	bc := newBodyCodec()
	f.Fuzz(func(t *testing.T, data []byte) {
		var hdr [frameLenSize]byte
		var pool bufPool
		r := bytes.NewReader(data)
		for range 8 {
			p, err := readFrame(r, &hdr, 4096, &pool)
			if err != nil {
				return
			}
			if len(*p) == 0 || len(*p) > 4096 {
				t.Fatalf("frame of %d bytes", len(*p))
			}
			switch (*p)[0] {
			case kindRequest:
				h, err := parseRequest(*p)
				if err != nil {
					break
				}
				if len(h.method) == 0 || h.timeout < 0 {
					t.Fatalf("bad parse %+v", h)
				}
				again := appendRequestHeader(nil, len(h.body), h.seq, h.timeout, string(h.method))
				again = append(again, h.body...)
				if !bytes.Equal(again[frameLenSize:], *p) {
					t.Fatalf("request does not re-encode")
				}
				var req StatRequest // bodies are untrusted too
				_ = bc.unmarshal(h.body, &req)
				var br BatchStatRequest
				_ = bc.unmarshal(h.body, &br)
			case kindResponse:
				h, err := parseResponse(*p)
				if err != nil {
					break
				}
				again := appendResponseHeader(nil, len(h.body), h.seq, h.code, string(h.msg))
				again = append(again, h.body...)
				if !bytes.Equal(again[frameLenSize:], *p) {
					t.Fatalf("response does not re-encode")
				}
				var resp StatResponse
				_ = bc.unmarshal(h.body, &resp)
			case kindCancel, kindGoAway, kindNotifyAck:
				_, _ = parseControl(*p, (*p)[0])
			case kindNotify:
				if _, body, err := parseNotify(*p); err == nil {
					var inv Invalidation
					_ = bc.unmarshal(body, &inv)
				}
			case kindAuth:
				tok, err := parseAuth(*p)
				if err != nil {
					break
				}
				if len(tok) == 0 || len(tok) > MaxTokenLen {
					t.Fatalf("token of %d bytes accepted", len(tok))
				}
				if again := appendAuth(nil, string(tok)); !bytes.Equal(again[frameLenSize:], *p) {
					t.Fatalf("auth does not re-encode")
				}
			}
			pool.put(p)
		}
	})
}

// FuzzBodyDecoder decodes arbitrary bytes into the message types: errors
// are fine, panics and runaway allocations are not.
func FuzzBodyDecoder(f *testing.F) {
	bc := newBodyCodec()
	for _, v := range []any{&StatResponse{Inode: Inode{Path: "/a"}}, &BatchStatRequest{Paths: []string{"/a", "/b"}},
		&MembersResponse{Members: []Member{{ID: "n1"}}}, &GroupsResponse{Groups: []GroupInfo{{Replicas: map[string]int{"a": 1}}}},
		&FiltersResponse{Filters: []ShardFilter{{FilterVersion: FilterVersion{Shard: "n1", Term: 2}, Data: []byte{1, 2}}}},
		&KeyringResponse{Keys: map[string]int{"k": 3}, Messages: map[string]string{"n1": "ok"}}} {
		b, _ := bc.getEncoder().encode(v)
		f.Add(append([]byte(nil), b...))
	}
	f.Add([]byte{0xdd, 0x7f, 0xff, 0xff, 0xff}) // array32 of 2^31 elements
	f.Add([]byte{0xdf, 0x7f, 0xff, 0xff, 0xff}) // map32 of 2^31 entries
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, v := range []any{&StatResponse{}, &BatchStatRequest{}, &BatchStatResponse{}, &MembersResponse{},
			&GroupsResponse{}, &ReadDirResponse{}, &SetAttrRequest{}, &FiltersRequest{}, &FiltersResponse{},
			&KeyringRequest{}, &KeyringResponse{}} {
			_ = bc.unmarshal(data, v)
		}
	})
}
