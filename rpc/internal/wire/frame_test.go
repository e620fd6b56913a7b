package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/internal/wire"
)

func TestFrameHeadersRoundTrip(t *testing.T) {
	body := []byte("body-bytes")
	b := wire.AppendRequestHeader(nil, len(body), 42, 1234567, "Namespace.Stat")
	b = append(b, body...)
	var hdr [wire.FrameLenSize]byte
	var pool wire.BufPool
	p, err := wire.ReadFrame(bytes.NewReader(b), &hdr, 1<<20, &pool)
	if err != nil {
		t.Fatal(err)
	}
	h, err := wire.ParseRequest(*p)
	if err != nil || h.Seq != 42 || h.Timeout != 1234567 || string(h.Method) != "Namespace.Stat" || !bytes.Equal(h.Body, body) {
		t.Fatalf("request %+v %v", h, err)
	}

	long := string(bytes.Repeat([]byte("m"), wire.MaxMessageLen+10))
	b = wire.AppendResponseHeader(nil, len(body), 7, uint16(rpc.CodeNotEmpty), long)
	b = append(b, body...)
	p, err = wire.ReadFrame(bytes.NewReader(b), &hdr, 1<<20, &pool)
	if err != nil {
		t.Fatal(err)
	}
	r, err := wire.ParseResponse(*p)
	if err != nil || r.Seq != 7 || r.Code != uint16(rpc.CodeNotEmpty) || len(r.Msg) != wire.MaxMessageLen || !bytes.Equal(r.Body, body) {
		t.Fatalf("response seq=%d code=%v msglen=%d %v", r.Seq, r.Code, len(r.Msg), err)
	}

	for _, tok := range []string{"t", "bearer-token", string(bytes.Repeat([]byte{'x'}, wire.MaxTokenLen))} {
		p, err = wire.ReadFrame(bytes.NewReader(wire.AppendAuth(nil, tok)), &hdr, 1<<20, &pool)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := wire.ParseAuth(*p); err != nil || string(got) != tok {
			t.Errorf("auth %q: %q %v", tok, got, err)
		}
	}
	for _, bad := range [][]byte{{wire.KindAuth}, append([]byte{wire.KindAuth}, make([]byte, wire.MaxTokenLen+1)...), {wire.KindCancel, 'x'}, nil} {
		if _, err := wire.ParseAuth(bad); !errors.Is(err, wire.ErrProtocol) {
			t.Errorf("auth frame of %d bytes: %v, want wire.ErrProtocol", len(bad), err)
		}
	}

	for _, kind := range []byte{wire.KindCancel, wire.KindGoAway} {
		b = wire.AppendControl(nil, kind, 99)
		p, err = wire.ReadFrame(bytes.NewReader(b), &hdr, 1<<20, &pool)
		if err != nil {
			t.Fatal(err)
		}
		if seq, err := wire.ParseControl(*p, kind); err != nil || seq != 99 {
			t.Errorf("control %d: %d %v", kind, seq, err)
		}
	}
}

func TestReadFrameLimits(t *testing.T) {
	var hdr [wire.FrameLenSize]byte
	var pool wire.BufPool
	frame := func(n uint32, payload []byte) io.Reader {
		return bytes.NewReader(append(binary.BigEndian.AppendUint32(nil, n), payload...))
	}
	tests := []struct {
		name string
		r    io.Reader
		max  int
		want error
	}{
		{"over max", frame(1025, nil), 1024, wire.ErrFrameTooLarge},
		{"huge", frame(0xffffffff, nil), wire.DefaultMaxFrameSize, wire.ErrFrameTooLarge},
		{"empty", frame(0, nil), 1024, wire.ErrProtocol},
		{"truncated small", frame(100, []byte("abc")), 1024, io.ErrUnexpectedEOF},
		{"truncated large", frame(1<<20, []byte("abc")), 2 << 20, io.ErrUnexpectedEOF},
		{"no length", bytes.NewReader([]byte{1, 2}), 1024, io.ErrUnexpectedEOF},
		{"eof", bytes.NewReader(nil), 1024, io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := wire.ReadFrame(tt.r, &hdr, tt.max, &pool)
			if !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
	// A large frame that arrives whole is read whole.
	payload := bytes.Repeat([]byte{7}, 300<<10)
	p, err := wire.ReadFrame(frame(uint32(len(payload)), payload), &hdr, 1<<20, &pool)
	if err != nil || !bytes.Equal(*p, payload) {
		t.Fatalf("large frame: %v", err)
	}
}

// TestReadFrameAllocatesOnlyWhatArrives: a peer announcing a 60 MiB frame
// and sending 10 bytes must not make the reader allocate 60 MiB.
func TestReadFrameAllocatesOnlyWhatArrives(t *testing.T) {
	var hdr [wire.FrameLenSize]byte
	var pool wire.BufPool
	in := append(binary.BigEndian.AppendUint32(nil, 60<<20), []byte("0123456789")...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := wire.ReadFrame(bytes.NewReader(in), &hdr, wire.DefaultMaxFrameSize, &pool)
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
	f.Add(wire.AppendRequestHeader(nil, 0, 1, 0, "A.B"))
	f.Add(append(wire.AppendRequestHeader(nil, 3, 9, 1e9, "Namespace.Stat"), 0x81, 0xa1, 'x'))
	f.Add(wire.AppendResponseHeader(nil, 0, 1, uint16(rpc.CodeExist), "exists"))
	f.Add(wire.AppendControl(nil, wire.KindCancel, 5))
	f.Add(wire.AppendControl(nil, wire.KindGoAway, 5))
	f.Add(wire.AppendAuth(nil, "token"))
	f.Add(wire.AppendControl(nil, wire.KindNotifyAck, 3))
	f.Add(append(binary.BigEndian.AppendUint32(nil, wire.ControlFrameLen+3), append([]byte{wire.KindNotify, 0, 0, 0, 0, 0, 0, 0, 1}, 0x81, 0xa1, 'p')...))
	f.Add(wire.AppendAuth(nil, string(bytes.Repeat([]byte{'t'}, wire.MaxTokenLen+1))))
	f.Add([]byte{0, 0, 0, 1, wire.KindAuth})
	f.Add([]byte{0, 0, 0, 1, 0xff})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte("GHB\x01garbage"))
	bc := rpc.NewCodec()
	f.Fuzz(func(t *testing.T, data []byte) {
		var hdr [wire.FrameLenSize]byte
		var pool wire.BufPool
		r := bytes.NewReader(data)
		for range 8 {
			p, err := wire.ReadFrame(r, &hdr, 4096, &pool)
			if err != nil {
				return
			}
			if len(*p) == 0 || len(*p) > 4096 {
				t.Fatalf("frame of %d bytes", len(*p))
			}
			switch (*p)[0] {
			case wire.KindRequest:
				h, err := wire.ParseRequest(*p)
				if err != nil {
					break
				}
				if len(h.Method) == 0 || h.Timeout < 0 {
					t.Fatalf("bad parse %+v", h)
				}
				again := wire.AppendRequestHeader(nil, len(h.Body), h.Seq, h.Timeout, string(h.Method))
				again = append(again, h.Body...)
				if !bytes.Equal(again[wire.FrameLenSize:], *p) {
					t.Fatalf("request does not re-encode")
				}
				var req rpc.StatRequest // bodies are untrusted too
				_ = bc.Unmarshal(h.Body, &req)
				var br rpc.BatchStatRequest
				_ = bc.Unmarshal(h.Body, &br)
			case wire.KindResponse:
				h, err := wire.ParseResponse(*p)
				if err != nil {
					break
				}
				again := wire.AppendResponseHeader(nil, len(h.Body), h.Seq, h.Code, string(h.Msg))
				again = append(again, h.Body...)
				if !bytes.Equal(again[wire.FrameLenSize:], *p) {
					t.Fatalf("response does not re-encode")
				}
				var resp rpc.StatResponse
				_ = bc.Unmarshal(h.Body, &resp)
			case wire.KindCancel, wire.KindGoAway, wire.KindNotifyAck:
				_, _ = wire.ParseControl(*p, (*p)[0])
			case wire.KindNotify:
				if _, body, err := wire.ParseNotify(*p); err == nil {
					var inv rpc.Invalidation
					_ = bc.Unmarshal(body, &inv)
				}
			case wire.KindAuth:
				tok, err := wire.ParseAuth(*p)
				if err != nil {
					break
				}
				if len(tok) == 0 || len(tok) > wire.MaxTokenLen {
					t.Fatalf("token of %d bytes accepted", len(tok))
				}
				if again := wire.AppendAuth(nil, string(tok)); !bytes.Equal(again[wire.FrameLenSize:], *p) {
					t.Fatalf("auth does not re-encode")
				}
			}
			pool.Put(p)
		}
	})
}
