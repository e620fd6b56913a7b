package rpctest

import (
	"encoding/binary"
	"io"
	"testing"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/internal/wire"
)

// The helpers of the tests that speak the wire protocol directly (rpc's and
// rpc/client's), on a raw connection.

// FrameReader reads the frames a server writes to a raw connection.
type FrameReader struct{ R io.Reader }

// Next returns the next frame's kind (its first byte) and the frame; a
// read error fails t.
func (f *FrameReader) Next(t testing.TB) (byte, []byte) {
	t.Helper()
	var hdr [4]byte
	if _, err := io.ReadFull(f.R, hdr[:]); err != nil {
		t.Fatalf("reading frame: %v", err)
	}
	p := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(f.R, p); err != nil {
		t.Fatalf("reading frame: %v", err)
	}
	return p[0], p
}

// EncodeBody returns the msgpack body encoding v.
func EncodeBody(v any) []byte {
	b, err := rpc.NewCodec().GetEncoder().Encode(v)
	if err != nil {
		panic(err)
	}
	return b
}

// ParseResponse returns the sequence number and code of a response frame.
func ParseResponse(p []byte) (seq uint64, code rpc.Code, err error) {
	h, err := wire.ParseResponse(p)
	return h.Seq, rpc.Code(h.Code), err
}
