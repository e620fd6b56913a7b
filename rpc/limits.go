package rpc

import "github.com/ghba/ghba/rpc/internal/wire"

// Limits of the protocol. The frame layout is specified in
// rpc/internal/wire (frame.go).
const (
	// MaxMethodLen is the longest method name the protocol carries.
	MaxMethodLen = wire.MaxMethodLen
	// MaxTokenLen is the longest bearer token an auth frame carries
	// (client.Options.Token); a server closes a connection that sends a
	// longer one.
	MaxTokenLen = wire.MaxTokenLen
	// DefaultMaxFrameSize is the default limit on a frame's length (64 MiB,
	// room for a full filter encoding). Frames are read incrementally, so a
	// peer that announces a large frame only costs memory for the bytes it
	// actually sends.
	DefaultMaxFrameSize = wire.DefaultMaxFrameSize
	// MinMaxFrameSize is the smallest accepted frame size limit.
	MinMaxFrameSize = wire.MinMaxFrameSize
)
