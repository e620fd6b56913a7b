package rpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// A hand-written msgpack writer and reader for the types on the hot path of
// every stat (statcodec.go). They produce and accept exactly what the
// reflection codec (Codec) does for the same struct, a map keyed by the
// fields' json names, so a peer that uses either reads the other.

// errMsgpack reports input that is not the msgpack a field expects.
var errMsgpack = errors.New("rpc: msgpack")

// msgpack format bytes used here.
const (
	mpNil     = 0xc0
	mpFalse   = 0xc2
	mpTrue    = 0xc3
	mpBin8    = 0xc4
	mpBin16   = 0xc5
	mpBin32   = 0xc6
	mpExt8    = 0xc7
	mpExt16   = 0xc8
	mpExt32   = 0xc9
	mpFloat32 = 0xca
	mpFloat64 = 0xcb
	mpUint8   = 0xcc
	mpUint16  = 0xcd
	mpUint32  = 0xce
	mpUint64  = 0xcf
	mpInt8    = 0xd0
	mpInt16   = 0xd1
	mpInt32   = 0xd2
	mpInt64   = 0xd3
	mpFixExt1 = 0xd4
	mpStr8    = 0xd9
	mpStr16   = 0xda
	mpStr32   = 0xdb
	mpArray16 = 0xdc
	mpArray32 = 0xdd
	mpMap16   = 0xde
	mpMap32   = 0xdf
)

// appendLen appends a container header: fix (its fixed-size form's first
// byte, fixMax its largest length; 0 if none), b8 (0 if none), b16, b32.
func appendLen(b []byte, n int, fix byte, fixMax int, b8, b16, b32 byte) []byte {
	switch {
	case fix != 0 && n <= fixMax:
		return append(b, fix|byte(n))
	case b8 != 0 && n < 256:
		return append(b, b8, byte(n))
	case n < 65536:
		return binary.BigEndian.AppendUint16(append(b, b16), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, b32), uint32(n))
	}
}

func appendMapLen(b []byte, n int) []byte { return appendLen(b, n, 0x80, 15, 0, mpMap16, mpMap32) }
func appendArrayLen(b []byte, n int) []byte {
	return appendLen(b, n, 0x90, 15, 0, mpArray16, mpArray32)
}

func appendStr(b []byte, s string) []byte {
	return append(appendLen(b, len(s), 0xa0, 31, mpStr8, mpStr16, mpStr32), s...)
}

func appendBin(b []byte, v []byte) []byte {
	if v == nil {
		return append(b, mpNil)
	}
	return append(appendLen(b, len(v), 0, 0, mpBin8, mpBin16, mpBin32), v...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, mpTrue)
	}
	return append(b, mpFalse)
}

// kvStr, kvUint and kvInt append a map entry with a string key.
func kvStr(b []byte, k, v string) []byte         { return appendStr(appendStr(b, k), v) }
func kvUint(b []byte, k string, v uint64) []byte { return appendUint(appendStr(b, k), v) }
func kvInt(b []byte, k string, v int64) []byte   { return appendInt(appendStr(b, k), v) }

// appendUint appends v in its shortest unsigned form.
func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= math.MaxInt8:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, mpUint8, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, mpUint16), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, mpUint32), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(b, mpUint64), v)
	}
}

// appendInt appends v in its shortest signed form.
func appendInt(b []byte, v int64) []byte {
	switch {
	case v > math.MaxInt8:
		switch {
		case v <= math.MaxInt16:
			return binary.BigEndian.AppendUint16(append(b, mpInt16), uint16(v))
		case v <= math.MaxInt32:
			return binary.BigEndian.AppendUint32(append(b, mpInt32), uint32(v))
		default:
			return binary.BigEndian.AppendUint64(append(b, mpInt64), uint64(v))
		}
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, mpInt8, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, mpInt16), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, mpInt32), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(b, mpInt64), uint64(v))
	}
}

// mpReader reads msgpack values from b, recording the first error; after
// one, every read returns a zero value.
type mpReader struct {
	b   []byte
	err error
	// lastHome and lastAddr are the last home and home address read
	// (strAs).
	lastHome, lastAddr string
}

func (r *mpReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{errMsgpack}, args...)...)
	}
	r.b = nil
}

// end fails if input is left after the value read.
func (r *mpReader) end() {
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d bytes after the value", len(r.b))
	}
}

// take returns the next n bytes.
func (r *mpReader) take(n int) []byte {
	if n < 0 || len(r.b) < n {
		r.fail("truncated value")
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *mpReader) byte1() byte {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *mpReader) be(n int) uint64 {
	v := r.take(n)
	switch len(v) {
	case 1:
		return uint64(v[0])
	case 2:
		return uint64(binary.BigEndian.Uint16(v))
	case 4:
		return uint64(binary.BigEndian.Uint32(v))
	case 8:
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// nextIsNil consumes a nil and reports whether there was one.
func (r *mpReader) nextIsNil() bool {
	if len(r.b) > 0 && r.b[0] == mpNil {
		r.b = r.b[1:]
		return true
	}
	return false
}

// containerLen reads a map (wantMap) or array header; nil reads as 0.
func (r *mpReader) containerLen(wantMap bool) int {
	c := r.byte1()
	switch {
	case r.err != nil:
		return 0
	case c == mpNil:
		return 0
	case wantMap && c&0xf0 == 0x80:
		return int(c & 0x0f)
	case !wantMap && c&0xf0 == 0x90:
		return int(c & 0x0f)
	case wantMap && c == mpMap16, !wantMap && c == mpArray16:
		return int(r.be(2))
	case wantMap && c == mpMap32, !wantMap && c == mpArray32:
		return int(r.be(4))
	}
	r.fail("type 0x%02x is not a map or array", c)
	return 0
}

// arrayLen reads an array header of what (named in its error): -1 for
// nil, else its length, refused when longer than the bytes left (each
// element takes at least one).
func (r *mpReader) arrayLen(what string) int {
	if r.nextIsNil() {
		return -1
	}
	k := r.containerLen(false)
	if k > len(r.b) {
		r.fail("%d %s in %d bytes", k, what, len(r.b))
		return -1
	}
	return k
}

// rawBytes reads a str or bin (or nil) and returns a view of its bytes.
func (r *mpReader) rawBytes() ([]byte, bool) {
	c := r.byte1()
	switch {
	case r.err != nil:
		return nil, false
	case c == mpNil:
		return nil, true
	case c >= 0xa0 && c <= 0xbf:
		return r.take(int(c & 0x1f)), true
	case c == mpStr8 || c == mpBin8:
		return r.take(int(r.be(1))), true
	case c == mpStr16 || c == mpBin16:
		return r.take(int(r.be(2))), true
	case c == mpStr32 || c == mpBin32:
		return r.take(int(r.be(4))), true
	}
	r.fail("type 0x%02x is not a string", c)
	return nil, false
}

func (r *mpReader) str() string {
	v, _ := r.rawBytes()
	return string(v)
}

// strAs reads a string, returning *last instead of a new copy when they are
// equal (a batch repeats its homes), and remembers it in *last.
func (r *mpReader) strAs(last *string) string {
	v, _ := r.rawBytes()
	if string(v) != *last {
		*last = string(v)
	}
	return *last
}

func (r *mpReader) bool() bool {
	switch c := r.byte1(); c {
	case mpTrue:
		return true
	case mpFalse, mpNil:
		return false
	default:
		r.fail("type 0x%02x is not a bool", c)
		return false
	}
}

// int reads an integer of any msgpack form, within [lo, hi].
func (r *mpReader) int(lo, hi int64) int64 {
	c := r.byte1()
	var v int64
	switch {
	case r.err != nil:
		return 0
	case c <= 0x7f:
		v = int64(c)
	case c >= 0xe0:
		v = int64(int8(c))
	case c == mpNil:
		return 0
	case c == mpUint8, c == mpUint16, c == mpUint32:
		v = int64(r.be(1 << (c - mpUint8)))
	case c == mpUint64:
		u := r.be(8)
		if u > math.MaxInt64 {
			r.fail("%d overflows", u)
			return 0
		}
		v = int64(u)
	case c == mpInt8:
		v = int64(int8(r.be(1)))
	case c == mpInt16:
		v = int64(int16(r.be(2)))
	case c == mpInt32:
		v = int64(int32(r.be(4)))
	case c == mpInt64:
		v = int64(r.be(8))
	default:
		r.fail("type 0x%02x is not an integer", c)
		return 0
	}
	if v < lo || v > hi {
		r.fail("%d out of range", v)
		return 0
	}
	return v
}

func (r *mpReader) uint32() uint32 { return uint32(r.int(0, math.MaxUint32)) }

// uint64 reads an unsigned integer, including one above math.MaxInt64.
func (r *mpReader) uint64() uint64 {
	if len(r.b) > 0 && r.b[0] == mpUint64 {
		r.b = r.b[1:]
		return r.be(8)
	}
	return uint64(r.int(0, math.MaxInt64))
}

// skip reads past one value of any type.
func (r *mpReader) skip() {
	for n := 1; n > 0 && r.err == nil; n-- {
		c := r.byte1()
		switch {
		case r.err != nil:
		case c <= 0x7f || c >= 0xe0 || c == mpNil || c == mpFalse || c == mpTrue:
		case c&0xf0 == 0x80:
			n += 2 * int(c&0x0f)
		case c&0xf0 == 0x90:
			n += int(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			r.take(int(c & 0x1f))
		case c == mpMap16:
			n += 2 * int(r.be(2))
		case c == mpMap32:
			n += 2 * int(r.be(4))
		case c == mpArray16:
			n += int(r.be(2))
		case c == mpArray32:
			n += int(r.be(4))
		case c == mpStr8 || c == mpBin8:
			r.take(int(r.be(1)))
		case c == mpStr16 || c == mpBin16:
			r.take(int(r.be(2)))
		case c == mpStr32 || c == mpBin32:
			r.take(int(r.be(4)))
		case c == mpExt8:
			r.take(1 + int(r.be(1)))
		case c == mpExt16:
			r.take(1 + int(r.be(2)))
		case c == mpExt32:
			r.take(1 + int(r.be(4)))
		case c >= mpFixExt1 && c <= mpFixExt1+4: // fixext 1, 2, 4, 8, 16
			r.take(1 + 1<<(c-mpFixExt1))
		case c == mpFloat32:
			r.take(4)
		case c == mpFloat64:
			r.take(8)
		case c >= mpUint8 && c <= mpUint64:
			r.take(1 << (c - mpUint8))
		case c >= mpInt8 && c <= mpInt64:
			r.take(1 << (c - mpInt8))
		default:
			r.fail("unknown type 0x%02x", c)
		}
		if n > len(r.b)+1 { // each value takes at least a byte
			r.fail("container longer than its input")
		}
	}
}
