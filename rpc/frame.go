package rpc

import (
	"encoding/binary"
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
// to the requests that follow (CodeUnauthenticated, or whatever the
// server's check returns). Clients send it right after the preface, before
// their first request.
const (
	preface = "GHB\x01"

	kindRequest  byte = 1
	kindResponse byte = 2
	kindCancel   byte = 3
	kindGoAway   byte = 4
	kindAuth     byte = 5

	frameLenSize      = 4
	requestFixedLen   = 1 + 8 + 8 + 1 // kind, seq, timeout, method length
	responseFixedLen  = 1 + 8 + 2 + 2 // kind, seq, code, message length
	controlFrameLen   = 1 + 8         // kind, seq
	maxMessageLen     = math.MaxUint16
	smallFrame        = 64 << 10 // frames up to this size use pooled buffers
	initialBufferSize = 4 << 10

	// MaxMethodLen is the longest method name the protocol carries.
	MaxMethodLen = math.MaxUint8
	// MaxTokenLen is the longest bearer token an auth frame carries
	// (Options.Token); a server closes a connection that sends a longer one.
	MaxTokenLen = 512
	// DefaultMaxFrameSize is the default limit on a frame's length (64 MiB,
	// room for a full filter encoding). Frames are read incrementally, so a
	// peer that announces a large frame only costs memory for the bytes it
	// actually sends.
	DefaultMaxFrameSize = 64 << 20
	// MinMaxFrameSize is the smallest accepted frame size limit.
	MinMaxFrameSize = 1 << 10
)

// bufPool recycles frame buffers up to smallFrame bytes.
type bufPool struct{ p sync.Pool }

// get returns a buffer of length n.
func (bp *bufPool) get(n int) *[]byte {
	b, _ := bp.p.Get().(*[]byte)
	if b == nil {
		b = new([]byte)
	}
	if cap(*b) < n {
		c := initialBufferSize
		for c < n {
			c *= 2
		}
		*b = make([]byte, n, c)
	}
	*b = (*b)[:n]
	return b
}

// put recycles b unless it is nil or large.
func (bp *bufPool) put(b *[]byte) {
	if b == nil || cap(*b) > smallFrame {
		return
	}
	bp.p.Put(b)
}

// readFrame reads one frame from r and returns its payload in a buffer from
// pool (return it with pool.put). hdr is scratch space for the length. The
// length is checked against max before any allocation, and payloads larger
// than smallFrame grow only as their bytes arrive.
func readFrame(r io.Reader, hdr *[frameLenSize]byte, max int, pool *bufPool) (*[]byte, error) {
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
	if n <= smallFrame {
		b := pool.get(int(n))
		if _, err := io.ReadFull(r, *b); err != nil {
			pool.put(b)
			return nil, unexpectedEOF(err)
		}
		return b, nil
	}
	buf := make([]byte, 0, smallFrame)
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

// requestHeader is a parsed request frame.
type requestHeader struct {
	seq     uint64
	timeout int64 // nanoseconds; 0 = none
	method  []byte
	body    []byte
}

// parseRequest parses a request payload (kind byte included). The returned
// slices alias p.
func parseRequest(p []byte) (requestHeader, error) {
	var h requestHeader
	if len(p) < requestFixedLen || p[0] != kindRequest {
		return h, fmt.Errorf("%w: short or mislabelled request frame", ErrProtocol)
	}
	h.seq = binary.BigEndian.Uint64(p[1:])
	t := binary.BigEndian.Uint64(p[9:])
	if t > math.MaxInt64 {
		return h, fmt.Errorf("%w: timeout out of range", ErrProtocol)
	}
	h.timeout = int64(t)
	ml := int(p[17])
	if ml == 0 || len(p) < requestFixedLen+ml {
		return h, fmt.Errorf("%w: bad method length", ErrProtocol)
	}
	h.method = p[requestFixedLen : requestFixedLen+ml]
	h.body = p[requestFixedLen+ml:]
	return h, nil
}

// appendRequestHeader appends the length prefix and request header for a
// body of bodyLen bytes. The caller has checked len(method).
func appendRequestHeader(dst []byte, bodyLen int, seq uint64, timeout int64, method string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(requestFixedLen+len(method)+bodyLen))
	dst = append(dst, kindRequest)
	dst = binary.BigEndian.AppendUint64(dst, seq)
	dst = binary.BigEndian.AppendUint64(dst, uint64(timeout))
	dst = append(dst, byte(len(method)))
	return append(dst, method...)
}

// responseHeader is a parsed response frame.
type responseHeader struct {
	seq  uint64
	code Code
	msg  []byte
	body []byte
}

// parseResponse parses a response payload (kind byte included). The
// returned slices alias p.
func parseResponse(p []byte) (responseHeader, error) {
	var h responseHeader
	if len(p) < responseFixedLen || p[0] != kindResponse {
		return h, fmt.Errorf("%w: short or mislabelled response frame", ErrProtocol)
	}
	h.seq = binary.BigEndian.Uint64(p[1:])
	h.code = Code(binary.BigEndian.Uint16(p[9:]))
	ml := int(binary.BigEndian.Uint16(p[11:]))
	if len(p) < responseFixedLen+ml {
		return h, fmt.Errorf("%w: bad message length", ErrProtocol)
	}
	h.msg = p[responseFixedLen : responseFixedLen+ml]
	h.body = p[responseFixedLen+ml:]
	return h, nil
}

// appendResponseHeader appends the length prefix and response header for a
// body of bodyLen bytes; msg is truncated to maxMessageLen bytes.
func appendResponseHeader(dst []byte, bodyLen int, seq uint64, code Code, msg string) []byte {
	if len(msg) > maxMessageLen {
		msg = msg[:maxMessageLen]
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(responseFixedLen+len(msg)+bodyLen))
	dst = append(dst, kindResponse)
	dst = binary.BigEndian.AppendUint64(dst, seq)
	dst = binary.BigEndian.AppendUint16(dst, uint16(code))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(msg)))
	return append(dst, msg...)
}

// parseControl parses a cancel or goaway payload of the given kind.
func parseControl(p []byte, kind byte) (uint64, error) {
	if len(p) != controlFrameLen || p[0] != kind {
		return 0, fmt.Errorf("%w: bad control frame", ErrProtocol)
	}
	return binary.BigEndian.Uint64(p[1:]), nil
}

// appendControl appends a complete cancel or goaway frame.
func appendControl(dst []byte, kind byte, seq uint64) []byte {
	dst = binary.BigEndian.AppendUint32(dst, controlFrameLen)
	dst = append(dst, kind)
	return binary.BigEndian.AppendUint64(dst, seq)
}

// parseAuth parses an auth payload (kind byte included) and returns the
// token, which aliases p.
func parseAuth(p []byte) ([]byte, error) {
	if len(p) < 2 || p[0] != kindAuth {
		return nil, fmt.Errorf("%w: empty or mislabelled auth frame", ErrProtocol)
	}
	if n := len(p) - 1; n > MaxTokenLen {
		return nil, fmt.Errorf("%w: token of %d bytes, limit %d", ErrProtocol, n, MaxTokenLen)
	}
	return p[1:], nil
}

// appendAuth appends a complete auth frame carrying token. The caller has
// checked that token is not empty; its length is not checked here (the
// server refuses a token over MaxTokenLen).
func appendAuth(dst []byte, token string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(1+len(token)))
	dst = append(dst, kindAuth)
	return append(dst, token...)
}
