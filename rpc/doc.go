// Package rpc is the wire protocol between ghba clients and metadata
// servers and between servers: the request and response types of the
// namespace and cluster operations (types.go), their msgpack encoding
// (Codec), the error codes, and a Server that dispatches named methods to
// typed handlers. The client, with its connection pool, retries, home
// cache, metadata cache and routing by the shards' filters, is package
// rpc/client; this package does not depend on it.
//
// # Wire format
//
// TCP. The client opens with the 4-byte preface "GHB\x01"; then both sides
// exchange length-prefixed frames (uint32 big-endian length, then a kind
// byte). A request carries a client-chosen sequence number, the time left
// before the client's deadline (relative, so clocks need not agree), the
// method name and a msgpack body; a response carries the sequence number,
// an error code, an error message and a msgpack body. Calls are pipelined:
// many may be outstanding on one connection and responses come back in any
// order. A cancel frame asks the server to cancel a call's context; a
// goaway frame, sent by a server that begins shutting down, tells the
// client the last request it accepted; an auth frame carries the client's
// bearer token for the requests that follow it. Frames are limited in size
// (DefaultMaxFrameSize); a bad preface, an oversized or malformed frame, or
// an unknown frame kind closes the connection and nothing else. The layout
// is specified in rpc/internal/wire (frame.go), the frame layer the server
// and the client share.
//
// Bodies are msgpack, encoded with github.com/hashicorp/go-msgpack/v2
// (already linked through hashicorp/raft). Structs are maps keyed by the
// names in their json tags, so the same types print as the CLI's --json
// output and fields can be added compatibly.
//
// # Authentication
//
// A client with a token (client.Options.Token) presents it once per
// connection, in an auth frame sent right after the preface (so it
// precedes the first request); the server keeps the token the connection
// last presented. If
// ServerOptions.Authenticate is set, the server calls it before every
// handler with the method name and that token: it returns the context the
// handler runs with (carrying what the token proves, for permission checks
// in the handlers) or an error sent back instead, typically wrapping
// ErrUnauthenticated (no, unknown, revoked or expired token) or
// fs.ErrPermission (a known identity not allowed the operation).
//
// # Errors
//
// Handlers return ordinary Go errors. The server maps them to a Code with
// ErrorCode (errors.Is against fs.ErrNotExist, fs.ErrExist,
// fs.ErrPermission, fs.ErrInvalid, ErrNotDir, ErrIsDir, ErrNotEmpty,
// ErrUnavailable, ErrInvalidPath, ErrUnauthenticated, context errors,
// ...; anything else is CodeInternal) and sends err.Error() as the
// message. The client returns a *RemoteError whose Is method matches the
// same sentinels, so, with c a *client.Client,
//
//	_, err := c.Stat(ctx, "/a/b")
//	if errors.Is(err, fs.ErrNotExist) { ... }
//
// works across the network, and across server-to-server hops (a handler
// that returns a *RemoteError keeps its code).
package rpc
