// Package wire is the frame layer of the ghba RPC protocol, shared by the
// server (package rpc) and the client (package rpc/client): the preface,
// the frame kinds and their layouts, a frame reader with a buffer pool, and
// the batching connection writer. Message bodies and error codes are
// package rpc's; here a code is its uint16 wire value.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
)

// Wire format (all integers big-endian).
//
// A connection starts with the client's 4-byte preface "GHB\x01" (magic and
// protocol version 1). After it, both directions carry frames:
//
//	frame    = length:uint32 payload[length]         1 <= length <= max frame size
//	payload  = kind:uint8 ...
//
//	request  = kind=1 seq:uint64 timeout:uint64 mlen:uint8 method[mlen] body
//	response = kind=2 seq:uint64 code:uint16 msglen:uint16 msg[msglen] body
//	cancel   = kind=3 seq:uint64                     (client → server)
//	goaway   = kind=4 lastseq:uint64                 (server → client)
//	auth     = kind=5 token[rest of frame]           (client → server)
//
// seq is chosen by the client, strictly increasing in the order requests are
// written on a connection; the response to a request carries the same seq,
// and responses may come in any order (calls are pipelined). timeout is the
// time the client still gives the call, in nanoseconds (0 = no deadline);
// it is relative so that clocks need not agree. body is msgpack
// (github.com/hashicorp/go-msgpack/v2, structs as maps keyed by their json
// tag names); a response with a non-zero code has an empty body and msg
// holds the server's error text. cancel asks the server to cancel the
// context of a call the client gave up on. goaway says the server is
// shutting down: requests with seq <= lastseq were accepted and will be
// answered; later ones were not and will not be executed.
//
// auth presents a bearer token (1..MaxTokenLen bytes; an empty or longer one
// is a protocol error that closes the connection). A client may send it at
// any time, and a later one replaces an earlier one; it applies to the
// requests the server reads after it, not to those already read. The
// server sends no answer: a token it does not accept shows in the responses
// to the requests that follow (rpc.CodeUnauthenticated, or whatever the
// server's check returns). Clients send it right after the preface, before
// their first request.
//
// Kinds 6 and 7 (notify and its ack) are the server's notifications,
// described in package rpc (notify.go):
//
//	notify   = kind=6 seq:uint64 body                (server → client)
//	ack      = kind=7 seq:uint64                     (client → server)
const (
	// Preface opens every connection, from the client.
	Preface = "GHB\x01"

	// Frame kinds: the first byte of a frame's payload.
	KindRequest   byte = 1
	KindResponse  byte = 2
	KindCancel    byte = 3
	KindGoAway    byte = 4
	KindAuth      byte = 5
	KindNotify    byte = 6
	KindNotifyAck byte = 7

	// FrameLenSize is the size of a frame's length prefix.
	FrameLenSize = 4
	// RequestFixedLen, ResponseFixedLen and ControlFrameLen are the sizes
	// of the fixed parts of payloads (kind byte included).
	RequestFixedLen  = 1 + 8 + 8 + 1 // kind, seq, timeout, method length
	ResponseFixedLen = 1 + 8 + 2 + 2 // kind, seq, code, message length
	ControlFrameLen  = 1 + 8         // kind, seq
	// MaxMessageLen is the longest error message a response carries
	// (longer ones are truncated).
	MaxMessageLen = math.MaxUint16
	// SmallFrame is the largest frame read into a pooled buffer (BufPool).
	SmallFrame = 64 << 10
	// InitialBufferSize is the capacity pooled buffers start with.
	InitialBufferSize = 4 << 10

	// MaxMethodLen is the longest method name the protocol carries.
	MaxMethodLen = math.MaxUint8
	// MaxTokenLen is the longest bearer token an auth frame carries; a
	// server closes a connection that sends a longer one.
	MaxTokenLen = 512
	// DefaultMaxFrameSize is the default limit on a frame's length (64 MiB,
	// room for a full filter encoding). Frames are read incrementally, so a
	// peer that announces a large frame only costs memory for the bytes it
	// actually sends.
	DefaultMaxFrameSize = 64 << 20
	// MinMaxFrameSize is the smallest accepted frame size limit.
	MinMaxFrameSize = 1 << 10
)

// Errors of the frame layer; package rpc exports them as rpc.ErrProtocol
// and rpc.ErrFrameTooLarge (the same values).
var (
	// ErrFrameTooLarge reports a frame over the configured maximum size.
	ErrFrameTooLarge = errors.New("frame too large")
	// ErrProtocol reports bytes on a connection that are not the ghba
	// protocol (bad preface, unknown frame kind, malformed header).
	ErrProtocol = errors.New("protocol error")
)

// BufPool recycles frame buffers up to SmallFrame bytes.
type BufPool struct{ p sync.Pool }

// Get returns a buffer of length n.
func (bp *BufPool) Get(n int) *[]byte {
	b, _ := bp.p.Get().(*[]byte)
	if b == nil {
		b = new([]byte)
	}
	if cap(*b) < n {
		c := InitialBufferSize
		for c < n {
			c *= 2
		}
		*b = make([]byte, n, c)
	}
	*b = (*b)[:n]
	return b
}

// Put recycles b unless it is nil or large.
func (bp *BufPool) Put(b *[]byte) {
	if b == nil || cap(*b) > SmallFrame {
		return
	}
	bp.p.Put(b)
}

// ReadFrame reads one frame from r and returns its payload in a buffer from
// pool (return it with pool.Put). hdr is scratch space for the length. The
// length is checked against max before any allocation, and payloads larger
// than SmallFrame grow only as their bytes arrive.
func ReadFrame(r io.Reader, hdr *[FrameLenSize]byte, max int, pool *BufPool) (*[]byte, error) {
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 {
		return nil, fmt.Errorf("%w: empty frame", ErrProtocol)
	}
	if uint64(n) > uint64(max) {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, max)
	}
	if n <= SmallFrame {
		b := pool.Get(int(n))
		if _, err := io.ReadFull(r, *b); err != nil {
			pool.Put(b)
			return nil, unexpectedEOF(err)
		}
		return b, nil
	}
	buf := make([]byte, 0, SmallFrame)
	for len(buf) < int(n) {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow geometrically
		}
		end := min(cap(buf), int(n))
		m, err := io.ReadFull(r, buf[len(buf):end])
		buf = buf[:len(buf)+m]
		if err != nil {
			return nil, unexpectedEOF(err)
		}
	}
	return &buf, nil
}

// unexpectedEOF turns io.EOF inside a frame into io.ErrUnexpectedEOF.
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// RequestHeader is a parsed request frame.
type RequestHeader struct {
	Seq     uint64
	Timeout int64 // nanoseconds; 0 = none
	Method  []byte
	Body    []byte
}

// ParseRequest parses a request payload (kind byte included). The returned
// slices alias p.
func ParseRequest(p []byte) (RequestHeader, error) {
	var h RequestHeader
	if len(p) < RequestFixedLen || p[0] != KindRequest {
		return h, fmt.Errorf("%w: short or mislabelled request frame", ErrProtocol)
	}
	h.Seq = binary.BigEndian.Uint64(p[1:])
	t := binary.BigEndian.Uint64(p[9:])
	if t > math.MaxInt64 {
		return h, fmt.Errorf("%w: timeout out of range", ErrProtocol)
	}
	h.Timeout = int64(t)
	ml := int(p[17])
	if ml == 0 || len(p) < RequestFixedLen+ml {
		return h, fmt.Errorf("%w: bad method length", ErrProtocol)
	}
	h.Method = p[RequestFixedLen : RequestFixedLen+ml]
	h.Body = p[RequestFixedLen+ml:]
	return h, nil
}

// AppendRequestHeader appends the length prefix and request header for a
// body of bodyLen bytes. The caller has checked len(method).
func AppendRequestHeader(dst []byte, bodyLen int, seq uint64, timeout int64, method string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(RequestFixedLen+len(method)+bodyLen))
	dst = append(dst, KindRequest)
	dst = binary.BigEndian.AppendUint64(dst, seq)
	dst = binary.BigEndian.AppendUint64(dst, uint64(timeout))
	dst = append(dst, byte(len(method)))
	return append(dst, method...)
}

// ResponseHeader is a parsed response frame.
type ResponseHeader struct {
	Seq  uint64
	Code uint16 // an rpc.Code
	Msg  []byte
	Body []byte
}

// ParseResponse parses a response payload (kind byte included). The
// returned slices alias p.
func ParseResponse(p []byte) (ResponseHeader, error) {
	var h ResponseHeader
	if len(p) < ResponseFixedLen || p[0] != KindResponse {
		return h, fmt.Errorf("%w: short or mislabelled response frame", ErrProtocol)
	}
	h.Seq = binary.BigEndian.Uint64(p[1:])
	h.Code = binary.BigEndian.Uint16(p[9:])
	ml := int(binary.BigEndian.Uint16(p[11:]))
	if len(p) < ResponseFixedLen+ml {
		return h, fmt.Errorf("%w: bad message length", ErrProtocol)
	}
	h.Msg = p[ResponseFixedLen : ResponseFixedLen+ml]
	h.Body = p[ResponseFixedLen+ml:]
	return h, nil
}

// AppendResponseHeader appends the length prefix and response header for a
// body of bodyLen bytes; msg is truncated to MaxMessageLen bytes.
func AppendResponseHeader(dst []byte, bodyLen int, seq uint64, code uint16, msg string) []byte {
	if len(msg) > MaxMessageLen {
		msg = msg[:MaxMessageLen]
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(ResponseFixedLen+len(msg)+bodyLen))
	dst = append(dst, KindResponse)
	dst = binary.BigEndian.AppendUint64(dst, seq)
	dst = binary.BigEndian.AppendUint16(dst, code)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(msg)))
	return append(dst, msg...)
}

// ParseControl parses a cancel, goaway or notify ack payload of the given
// kind.
func ParseControl(p []byte, kind byte) (uint64, error) {
	if len(p) != ControlFrameLen || p[0] != kind {
		return 0, fmt.Errorf("%w: bad control frame", ErrProtocol)
	}
	return binary.BigEndian.Uint64(p[1:]), nil
}

// AppendControl appends a complete cancel, goaway or notify ack frame.
func AppendControl(dst []byte, kind byte, seq uint64) []byte {
	dst = binary.BigEndian.AppendUint32(dst, ControlFrameLen)
	dst = append(dst, kind)
	return binary.BigEndian.AppendUint64(dst, seq)
}

// ParseAuth parses an auth payload (kind byte included) and returns the
// token, which aliases p.
func ParseAuth(p []byte) ([]byte, error) {
	if len(p) < 2 || p[0] != KindAuth {
		return nil, fmt.Errorf("%w: empty or mislabelled auth frame", ErrProtocol)
	}
	if n := len(p) - 1; n > MaxTokenLen {
		return nil, fmt.Errorf("%w: token of %d bytes, limit %d", ErrProtocol, n, MaxTokenLen)
	}
	return p[1:], nil
}

// AppendAuth appends a complete auth frame carrying token. The caller has
// checked that token is not empty; its length is not checked here (the
// server refuses a token over MaxTokenLen).
func AppendAuth(dst []byte, token string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(1+len(token)))
	dst = append(dst, KindAuth)
	return append(dst, token...)
}

// ParseNotify parses a notify payload (kind byte included); body aliases p.
func ParseNotify(p []byte) (seq uint64, body []byte, err error) {
	if len(p) < ControlFrameLen || p[0] != KindNotify {
		return 0, nil, fmt.Errorf("%w: short or mislabelled notify frame", ErrProtocol)
	}
	return binary.BigEndian.Uint64(p[1:]), p[ControlFrameLen:], nil
}

// AppendNotifyHeader appends the length prefix and notify header for a
// body of bodyLen bytes.
func AppendNotifyHeader(dst []byte, bodyLen int, seq uint64) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(ControlFrameLen+bodyLen))
	dst = append(dst, KindNotify)
	return binary.BigEndian.AppendUint64(dst, seq)
}
