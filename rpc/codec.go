package rpc

import (
	"fmt"
	"sync"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// bodyCodec encodes and decodes message bodies as msgpack with
// github.com/hashicorp/go-msgpack/v2, the codec hashicorp/raft already links
// into the binary (one msgpack implementation, not two). Structs are encoded
// as maps keyed by their `codec` or `json` tag names, so fields can be added
// without breaking older peers (unknown keys are skipped). Encoders and
// decoders are pooled; []byte fields are copied on decode, so a decoded
// value never aliases the frame buffer.
type bodyCodec struct {
	h    *codec.MsgpackHandle
	encs sync.Pool
	decs sync.Pool
}

func newBodyCodec() *bodyCodec {
	h := &codec.MsgpackHandle{WriteExt: true}
	h.MaxInitLen = 4096 // bound allocations driven by a container length in the input
	bc := &bodyCodec{h: h}
	bc.encs.New = func() any {
		e := &encoder{buf: make([]byte, 0, initialBufferSize)}
		e.e = codec.NewEncoderBytes(&e.buf, bc.h)
		return e
	}
	bc.decs.New = func() any { return codec.NewDecoderBytes(nil, bc.h) }
	return bc
}

// encoder is a pooled msgpack encoder with its output buffer.
type encoder struct {
	e   *codec.Encoder
	buf []byte
}

// getEncoder returns a pooled encoder; give it back with putEncoder once its
// output is no longer used.
func (bc *bodyCodec) getEncoder() *encoder {
	return bc.encs.Get().(*encoder)
}

// putEncoder recycles e unless its buffer grew large.
func (bc *bodyCodec) putEncoder(e *encoder) {
	if cap(e.buf) > smallFrame {
		e.buf = make([]byte, 0, initialBufferSize)
	}
	bc.encs.Put(e)
}

// encode encodes v into e's buffer and returns the bytes, valid until the
// next encode or putEncoder.
func (e *encoder) encode(v any) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil { // the codec should not panic; never let it kill a server
			err = fmt.Errorf("rpc: encode %T: %v", v, r)
		}
	}()
	e.e.ResetBytes(&e.buf)
	err = e.e.Encode(v)
	return e.buf, err
}

// unmarshal decodes b into v (a pointer).
func (bc *bodyCodec) unmarshal(b []byte, v any) (err error) {
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
