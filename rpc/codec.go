package rpc

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/ghba/ghba/rpc/internal/wire"
)

// Codec encodes and decodes message bodies as msgpack with
// github.com/hashicorp/go-msgpack/v2, the codec hashicorp/raft already links
// into the binary (one msgpack implementation, not two). Structs are encoded
// as maps keyed by their `codec` or `json` tag names, so fields can be added
// without breaking older peers (unknown keys are skipped). Encoders and
// decoders are pooled; []byte fields are copied on decode, so a decoded
// value never aliases the frame buffer.
//
// The server and the client (package rpc/client) each hold one: the bodies
// are part of the protocol, and StatResponse and BatchStatResponse have a
// hand-written encoding (statcodec.go) that only a Codec uses. It is safe
// for concurrent use.
type Codec struct {
	h    *codec.MsgpackHandle
	encs sync.Pool
	decs sync.Pool
}

// NewCodec returns a Codec.
func NewCodec() *Codec {
	h := &codec.MsgpackHandle{WriteExt: true}
	h.MaxInitLen = 4096 // bound allocations driven by a container length in the input
	bc := &Codec{h: h}
	bc.encs.New = func() any {
		e := &Encoder{buf: make([]byte, 0, wire.InitialBufferSize)}
		e.e = codec.NewEncoderBytes(&e.buf, bc.h)
		return e
	}
	bc.decs.New = func() any { return codec.NewDecoderBytes(nil, bc.h) }
	return bc
}

// Encoder is a pooled msgpack encoder with its output buffer.
type Encoder struct {
	e   *codec.Encoder
	buf []byte
}

// GetEncoder returns a pooled Encoder; give it back with PutEncoder once
// its output is no longer used.
func (bc *Codec) GetEncoder() *Encoder {
	return bc.encs.Get().(*Encoder)
}

// PutEncoder recycles e unless its buffer grew large.
func (bc *Codec) PutEncoder(e *Encoder) {
	if cap(e.buf) > wire.SmallFrame {
		e.buf = make([]byte, 0, wire.InitialBufferSize)
	}
	bc.encs.Put(e)
}

// Encode encodes v into e's buffer and returns the bytes, valid until the
// next Encode or PutEncoder.
func (e *Encoder) Encode(v any) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil { // the codec should not panic; never let it kill a server
			err = fmt.Errorf("rpc: encode %T: %v", v, r)
		}
	}()
	if f, ok := v.(msgpackAppender); ok {
		e.buf = f.appendMsgpack(e.buf[:0])
		return e.buf, nil
	}
	e.e.ResetBytes(&e.buf)
	err = e.e.Encode(v)
	return e.buf, err
}

// msgpackAppender and msgpackDecoder are bodies with a hand-written
// encoding (statcodec.go), which Codec uses instead of reflection.
type msgpackAppender interface {
	appendMsgpack(b []byte) []byte
}

type msgpackDecoder interface {
	decodeMsgpack(b []byte) error
}

// Unmarshal decodes b into v (a pointer).
func (bc *Codec) Unmarshal(b []byte, v any) (err error) {
	if f, ok := v.(msgpackDecoder); ok {
		return f.decodeMsgpack(b)
	}
	d := bc.decs.Get().(*codec.Decoder)
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("rpc: decode %T: %v", v, r)
		}
		bc.decs.Put(d)
	}()
	d.ResetBytes(b)
	return d.Decode(v)
}

// Bytes is a []byte field that decodes in one copy whatever its size. The
// codec's own []byte decoding grows the slice by at most MaxInitLen (4 KiB)
// at a time and copies it each time, so a 1 MiB filter took about 70 ms to
// decode; Bytes takes the value's encoding as it stands in the frame
// instead. It is encoded like []byte (msgpack bin), so peers that declare
// the field as []byte read it, and it reads theirs.
type Bytes []byte

// CodecEncodeSelf encodes b as msgpack bin.
func (b Bytes) CodecEncodeSelf(e *codec.Encoder) { e.MustEncode([]byte(b)) }

// CodecDecodeSelf decodes a msgpack bin or str (or nil) into b.
func (b *Bytes) CodecDecodeSelf(d *codec.Decoder) {
	var raw codec.Raw // the value's encoding, copied out of the frame once
	d.MustDecode(&raw)
	v, err := msgpackBytes(raw)
	if err != nil {
		panic(err) // the codec reports a panic as the decode's error
	}
	*b = v
}

// msgpackBytes returns the payload of the msgpack bin or str value raw (a
// slice of raw, nil for msgpack nil).
func msgpackBytes(raw []byte) ([]byte, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("rpc: bytes: empty value")
	}
	var n, hdr int
	switch c := raw[0]; {
	case c == 0xc0: // nil
		return nil, nil
	case c >= 0xa0 && c <= 0xbf: // fixstr
		n, hdr = int(c&0x1f), 1
	case c == 0xc4 || c == 0xd9: // bin8, str8
		hdr = 2
	case c == 0xc5 || c == 0xda: // bin16, str16
		hdr = 3
	case c == 0xc6 || c == 0xdb: // bin32, str32
		hdr = 5
	default:
		return nil, fmt.Errorf("rpc: bytes: msgpack type 0x%02x is not bin or str", c)
	}
	if len(raw) < hdr {
		return nil, fmt.Errorf("rpc: bytes: truncated header")
	}
	switch hdr {
	case 2:
		n = int(raw[1])
	case 3:
		n = int(binary.BigEndian.Uint16(raw[1:]))
	case 5:
		n = int(binary.BigEndian.Uint32(raw[1:]))
	}
	if len(raw)-hdr != n {
		return nil, fmt.Errorf("rpc: bytes: length %d, %d bytes follow", n, len(raw)-hdr)
	}
	return raw[hdr:], nil
}
