package rpc

import (
	"context"
	"errors"
	"io/fs"
	"strconv"
	"strings"

	"github.com/ghba/ghba/rpc/internal/wire"
)

// Sentinel errors of the namespace and of the transport. Handlers return
// them (wrapped with %w as they like); the server turns them into wire codes
// and the client turns the codes back, so errors.Is works on both sides of a
// call. fs.ErrNotExist, fs.ErrExist, fs.ErrPermission and fs.ErrInvalid
// travel the same way.
var (
	// ErrNotDir reports a path component, or the target of a directory
	// operation, that is not a directory.
	ErrNotDir = errors.New("not a directory")
	// ErrIsDir reports a file operation on a directory.
	ErrIsDir = errors.New("is a directory")
	// ErrNotEmpty reports rmdir (or rename over) a non-empty directory.
	ErrNotEmpty = errors.New("directory not empty")
	// ErrUnavailable reports that the node that must answer cannot be
	// reached now (the path's home is down, no address answered, a
	// connection broke). It never means "does not exist".
	ErrUnavailable = errors.New("unavailable")
	// ErrInvalidPath reports a path that fails validation (relative, ".."
	// escape, NUL byte, name over 255 bytes, path over 4096 bytes).
	ErrInvalidPath = errors.New("invalid path")
	// ErrBadRequest reports a request body the server could not decode.
	ErrBadRequest = errors.New("bad request")
	// ErrUnknownMethod reports a method name no handler is registered for.
	ErrUnknownMethod = errors.New("unknown method")
	// ErrShuttingDown reports a request the server refused, without
	// executing it, because it is shutting down. A client may send it to
	// another node even if it is not idempotent. Errors with this code also
	// match ErrUnavailable.
	ErrShuttingDown = errors.New("server shutting down")
	// ErrOutcomeUnknown reports a call whose request may have reached the
	// server but whose response never arrived (connection lost, deadline
	// passed). A write may or may not have been applied; the client does not
	// retry it elsewhere.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrRemote matches every error the remote handler returned (any
	// *RemoteError), whatever its code.
	ErrRemote = errors.New("remote error")
	// ErrFrameTooLarge reports a frame over the configured maximum size.
	ErrFrameTooLarge = wire.ErrFrameTooLarge
	// ErrProtocol reports bytes on a connection that are not the ghba
	// protocol (bad preface, unknown frame kind, malformed header).
	ErrProtocol = wire.ErrProtocol
	// ErrClientClosed reports a call on a closed client (package
	// rpc/client).
	ErrClientClosed = errors.New("rpc: client closed")
	// ErrServerClosed is returned by Serve after Shutdown or Close.
	ErrServerClosed = errors.New("rpc: server closed")
	// ErrNotLeader reports a request for a shard that the receiving node
	// does not lead (any more). It also matches ErrUnavailable;
	// NotLeaderHint returns the leader the receiver knows, if any.
	ErrNotLeader = errors.New("not the leader")
	// ErrUnauthenticated reports a request that carried no token, or one
	// that is unknown, revoked or expired, where one is required (see
	// ServerOptions.Authenticate). A token that is valid but does not allow
	// the operation is refused with fs.ErrPermission instead.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrVersionMismatch reports a conditional change (for example
	// SetAttrRequest.IfVersion) refused because the inode's version is
	// not the one the caller named: someone changed it since the caller
	// read it. Nothing was changed; read again and retry.
	ErrVersionMismatch = errors.New("version mismatch")
	// ErrNoAttr reports an extended attribute that the inode does not
	// have (ENODATA): a get or a remove of it, or a replace-only set.
	ErrNoAttr = errors.New("no such extended attribute")
	// ErrNoSpace reports a change that would take an inode's extended
	// attributes past their limit (ENOSPC).
	ErrNoSpace = errors.New("no space left for extended attributes")
	// ErrNameTooLong reports a name or a path longer than the cluster
	// keeps (ENAMETOOLONG), a directory rename among them whose subtree
	// would hold one. It also matches ErrInvalidPath.
	ErrNameTooLong = errors.New("name too long")
)

// Code is the error code carried in a response frame. CodeOK means success;
// every other code names one error class and maps to one or more sentinel
// errors on the client (see RemoteError.Is). Codes are part of the wire
// format: never renumber them.
type Code uint16

// Error codes. Add new codes at the end.
const (
	CodeOK               Code = 0  // success
	CodeInternal         Code = 1  // any other handler error; message carried
	CodeNotExist         Code = 2  // fs.ErrNotExist
	CodeExist            Code = 3  // fs.ErrExist
	CodePermission       Code = 4  // fs.ErrPermission
	CodeNotDir           Code = 5  // ErrNotDir
	CodeIsDir            Code = 6  // ErrIsDir
	CodeNotEmpty         Code = 7  // ErrNotEmpty
	CodeUnavailable      Code = 8  // ErrUnavailable
	CodeInvalidPath      Code = 9  // ErrInvalidPath (also matches fs.ErrInvalid)
	CodeBadRequest       Code = 10 // ErrBadRequest
	CodeUnknownMethod    Code = 11 // ErrUnknownMethod
	CodeDeadlineExceeded Code = 12 // context.DeadlineExceeded
	CodeCanceled         Code = 13 // context.Canceled
	CodeShuttingDown     Code = 14 // ErrShuttingDown (also matches ErrUnavailable); not executed
	CodeInvalid          Code = 15 // fs.ErrInvalid (invalid argument other than a path)
	CodeNotLeader        Code = 16 // ErrNotLeader (also matches ErrUnavailable); message names the leader
	CodeUnauthenticated  Code = 17 // ErrUnauthenticated
	CodeVersionMismatch  Code = 18 // ErrVersionMismatch
	CodeUnsupported      Code = 19 // errors.ErrUnsupported (not every member supports the operation yet)
	CodeNoAttr           Code = 20 // ErrNoAttr
	CodeNoSpace          Code = 21 // ErrNoSpace
	CodeNameTooLong      Code = 22 // ErrNameTooLong (also matches ErrInvalidPath and fs.ErrInvalid)
)

var codeNames = [...]string{
	CodeOK:               "ok",
	CodeInternal:         "internal",
	CodeNotExist:         "not_exist",
	CodeExist:            "exist",
	CodePermission:       "permission",
	CodeNotDir:           "not_dir",
	CodeIsDir:            "is_dir",
	CodeNotEmpty:         "not_empty",
	CodeUnavailable:      "unavailable",
	CodeInvalidPath:      "invalid_path",
	CodeBadRequest:       "bad_request",
	CodeUnknownMethod:    "unknown_method",
	CodeDeadlineExceeded: "deadline_exceeded",
	CodeCanceled:         "canceled",
	CodeShuttingDown:     "shutting_down",
	CodeInvalid:          "invalid",
	CodeNotLeader:        "not_leader",
	CodeUnauthenticated:  "unauthenticated",
	CodeVersionMismatch:  "version_mismatch",
	CodeUnsupported:      "unsupported",
	CodeNoAttr:           "no_attr",
	CodeNoSpace:          "no_space",
	CodeNameTooLong:      "name_too_long",
}

// String returns the code's short name, e.g. "not_exist".
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "code_" + strconv.Itoa(int(c))
}

// sentinel returns the primary error a code stands for, nil for CodeOK and
// CodeInternal (and unknown codes).
func (c Code) sentinel() error {
	switch c {
	case CodeNotExist:
		return fs.ErrNotExist
	case CodeExist:
		return fs.ErrExist
	case CodePermission:
		return fs.ErrPermission
	case CodeNotDir:
		return ErrNotDir
	case CodeIsDir:
		return ErrIsDir
	case CodeNotEmpty:
		return ErrNotEmpty
	case CodeUnavailable:
		return ErrUnavailable
	case CodeInvalidPath:
		return ErrInvalidPath
	case CodeBadRequest:
		return ErrBadRequest
	case CodeUnknownMethod:
		return ErrUnknownMethod
	case CodeDeadlineExceeded:
		return context.DeadlineExceeded
	case CodeCanceled:
		return context.Canceled
	case CodeShuttingDown:
		return ErrShuttingDown
	case CodeInvalid:
		return fs.ErrInvalid
	case CodeNotLeader:
		return ErrNotLeader
	case CodeUnauthenticated:
		return ErrUnauthenticated
	case CodeVersionMismatch:
		return ErrVersionMismatch
	case CodeUnsupported:
		return errors.ErrUnsupported
	case CodeNoAttr:
		return ErrNoAttr
	case CodeNoSpace:
		return ErrNoSpace
	case CodeNameTooLong:
		return ErrNameTooLong
	}
	return nil
}

// Err returns the error a response with this code and message stands for:
// nil for CodeOK, otherwise a *RemoteError.
func (c Code) Err(msg string) error {
	if c == CodeOK {
		return nil
	}
	return &RemoteError{Code: c, Message: msg}
}

// RemoteError is an error returned by the remote handler, as received by the
// client. errors.Is matches it against the sentinel of its code (for
// example fs.ErrNotExist for CodeNotExist), against ErrRemote, and against
// ErrUnavailable for CodeShuttingDown and fs.ErrInvalid for
// CodeInvalidPath. Use errors.As to read the code and the server's message.
type RemoteError struct {
	// Code is the wire error code.
	Code Code
	// Message is the server's err.Error() text.
	Message string
}

// Error returns the server's message.
func (e *RemoteError) Error() string {
	if e.Message == "" {
		return "remote: " + e.Code.String()
	}
	return e.Message
}

// Is reports whether target is a sentinel this error's code stands for.
func (e *RemoteError) Is(target error) bool {
	if target == ErrRemote {
		return true
	}
	if s := e.Code.sentinel(); s != nil && target == s {
		return true
	}
	switch e.Code {
	case CodeShuttingDown, CodeNotLeader:
		return target == ErrUnavailable
	case CodeInvalidPath:
		return target == fs.ErrInvalid
	case CodeNameTooLong:
		return target == ErrInvalidPath || target == fs.ErrInvalid
	}
	return false
}

// ErrorCode returns the wire code for a handler's error: CodeOK for nil, the
// code of a *RemoteError found in the chain (so codes survive server-to-
// server hops), then the first sentinel that errors.Is matches, and
// CodeInternal otherwise. Unavailability is tested before non-existence, so
// an error that says both is reported as unavailable; ErrUnauthenticated is
// tested before fs.ErrPermission.
//
// ErrorCode never returns CodeShuttingDown: that code promises the request
// was not executed, which only the transport itself can know. A handler's
// ErrShuttingDown, or a downstream node's shutting-down answer, becomes
// CodeUnavailable.
func ErrorCode(err error) Code {
	if err == nil {
		return CodeOK
	}
	if re, ok := errors.AsType[*RemoteError](err); ok {
		switch re.Code {
		case CodeShuttingDown:
			return CodeUnavailable
		case CodeOK:
			return CodeInternal
		}
		return re.Code
	}
	switch {
	case errors.Is(err, ErrNotLeader):
		return CodeNotLeader
	case errors.Is(err, ErrShuttingDown), errors.Is(err, ErrUnavailable):
		return CodeUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return CodeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return CodeCanceled
	case errors.Is(err, ErrVersionMismatch):
		return CodeVersionMismatch
	case errors.Is(err, errors.ErrUnsupported):
		return CodeUnsupported
	case errors.Is(err, ErrNoAttr):
		return CodeNoAttr
	case errors.Is(err, ErrNoSpace):
		return CodeNoSpace
	case errors.Is(err, ErrNameTooLong):
		return CodeNameTooLong
	case errors.Is(err, fs.ErrNotExist):
		return CodeNotExist
	case errors.Is(err, fs.ErrExist):
		return CodeExist
	case errors.Is(err, ErrUnauthenticated):
		return CodeUnauthenticated
	case errors.Is(err, fs.ErrPermission):
		return CodePermission
	case errors.Is(err, ErrNotDir):
		return CodeNotDir
	case errors.Is(err, ErrIsDir):
		return CodeIsDir
	case errors.Is(err, ErrNotEmpty):
		return CodeNotEmpty
	case errors.Is(err, ErrInvalidPath):
		return CodeInvalidPath
	case errors.Is(err, ErrBadRequest):
		return CodeBadRequest
	case errors.Is(err, ErrUnknownMethod):
		return CodeUnknownMethod
	case errors.Is(err, fs.ErrInvalid):
		return CodeInvalid
	}
	return CodeInternal
}

// NotLeaderError reports that the receiving node does not lead Shard, and
// names the leader it knows (Leader and Addr empty when it knows none). It
// matches ErrNotLeader and ErrUnavailable; across the wire it travels as
// CodeNotLeader, and NotLeaderHint reads the leader back.
type NotLeaderError struct {
	// Shard is the shard the request named.
	Shard string
	// Leader is the node id of the leader the receiver knows; Addr its
	// RPC address.
	Leader, Addr string
}

// Error says which shard and which leader, in the form NotLeaderHint
// parses.
func (e *NotLeaderError) Error() string {
	return "not the leader of shard " + e.Shard + "; leader=" + e.Leader + " addr=" + e.Addr
}

// Is matches ErrNotLeader and ErrUnavailable.
func (e *NotLeaderError) Is(target error) bool {
	return target == ErrNotLeader || target == ErrUnavailable
}

// NotLeaderHint returns the leader a not-leader error names (a
// *NotLeaderError, or its CodeNotLeader form received from a server); ok
// is false when err is not one or names no leader.
func NotLeaderHint(err error) (leader, addr string, ok bool) {
	if e, isNL := errors.AsType[*NotLeaderError](err); isNL {
		return e.Leader, e.Addr, e.Leader != ""
	}
	re, isRE := errors.AsType[*RemoteError](err)
	if !isRE || re.Code != CodeNotLeader {
		return "", "", false
	}
	for _, f := range strings.Fields(re.Message) {
		if v, found := strings.CutPrefix(f, "leader="); found {
			leader = v
		} else if v, found := strings.CutPrefix(f, "addr="); found {
			addr = v
		}
	}
	return leader, addr, leader != ""
}
