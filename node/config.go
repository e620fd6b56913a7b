// Package node is one ghba metadata server: its lifecycle (node.go), its
// configuration, its group's Raft and the leader's work, joining the Serf
// pool and a group, reshaping groups (split, merge, switch), the Directory
// the namespace routes with, the RPC and HTTP endpoints of the cluster
// layer, and logging. The metadata logic itself is in node/namespace, the
// Badger store in node/store. docs/design.md describes the whole.
//
//	node.go       Node: New, Start, Shutdown, Leave, Status
//	config.go     Config and its validation
//	raft.go       the group Raft: open, close, apply
//	leader.go     the leader loop: establish, reconcile member by member, add and remove members
//	join.go       retry_join and ghba join; the group join loop; joins and leaves at the leader
//	reshape.go    split, merge and switching a running node to another group
//	serf.go       Serf: configuration, tags, events
//	directory.go  the namespace's Directory: peers and the root home from Serf and the FSM
//	admin.go      Cluster.* RPC methods: members, groups, status, join, leave
//	http.go       /metrics, /v1/status, /v1/health; mounts the web console (package console)
//	wire.go       the cluster layer's server-to-server protocol
//	logging.go    hclog and log.Logger adapters into the node's slog logger
package node

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ghba/ghba/node/acl"
	"github.com/ghba/ghba/node/console"
	"github.com/ghba/ghba/rpc"

	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/shard"
	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc/tlsutil"
)

// GroupAuto asks the cluster to choose the group (docs/design.md, "Groups").
const GroupAuto = "auto"

// Ports are the TCP (and for Serf also UDP) ports a node listens on.
type Ports struct {
	RPC  int `mapstructure:"rpc"`
	Raft int `mapstructure:"raft"`
	Serf int `mapstructure:"serf"`
	HTTP int `mapstructure:"http"`
}

// Config is a node's configuration. cmd/ghba fills it from a YAML file,
// GHBA_* environment variables and flags; node never reads files or the
// environment itself. The mapstructure names are the config-file keys (a
// contract).
type Config struct {
	NodeID             string        `mapstructure:"node_id"`
	DataDir            string        `mapstructure:"data_dir"`
	BindAddr           string        `mapstructure:"bind_addr"`
	AdvertiseAddr      string        `mapstructure:"advertise_addr"`
	Ports              Ports         `mapstructure:"ports"`
	Group              string        `mapstructure:"group"`
	Bootstrap          bool          `mapstructure:"bootstrap"`
	RetryJoin          []string      `mapstructure:"retry_join"`
	MaxGroupSize       GroupSize     `mapstructure:"max_group_size"`
	Replication        int           `mapstructure:"replication"`
	ReplicaRepairAfter time.Duration `mapstructure:"replica_repair_after"`
	ShardLogStore      string        `mapstructure:"shard_log_store"`
	BitsPerFile        float64       `mapstructure:"bits_per_file"`
	FilterCapacity     int           `mapstructure:"filter_capacity"`
	LRUEntries         int           `mapstructure:"lru_entries"`
	LRUBitsPerFile     float64       `mapstructure:"lru_bits_per_file"`
	L1Admission        string        `mapstructure:"l1_admission"`
	FilterMemoryMB     int           `mapstructure:"filter_memory_mb"`
	PropagateThreshold float64       `mapstructure:"propagate_threshold"`
	PropagateInterval  time.Duration `mapstructure:"propagate_interval"`
	Placement          string        `mapstructure:"placement"`
	PlacementSpread    int           `mapstructure:"placement_spread"`
	Scheme             string        `mapstructure:"scheme"`
	CacheLease         time.Duration `mapstructure:"cache_lease"`
	DataGCGrace        time.Duration `mapstructure:"data_gc_grace"` // unreferenced content objects kept this long
	// StopHandOverTimeout bounds how long a graceful stop (Node.Stop,
	// SIGTERM) hands the node's shard leaderships over before it closes;
	// 0: none, a stop is a crash (docs/design.md, "Node lifecycle").
	StopHandOverTimeout time.Duration `mapstructure:"stop_handover_timeout"`
	LogLevel            string        `mapstructure:"log_level"`
	// EnableDebug serves Go's profiles (net/http/pprof) under /debug/pprof/
	// on the HTTP port; with ACLs on, only to a management token.
	EnableDebug bool `mapstructure:"enable_debug"`
	// TLS secures the RPC, Raft and HTTP ports (all or none).
	TLS tlsutil.Config `mapstructure:"tls"`
	// Encrypt is the Serf gossip encryption key: base64 of 16, 24 or 32
	// bytes (ghba keygen); every node of a cluster needs the same.
	Encrypt string `mapstructure:"encrypt"`
	// ACL turns on users, tokens and permission checks (acl.Config).
	ACL acl.Config `mapstructure:"acl"`
	// Limits bound what clients may hold of the node's RPC port.
	Limits Limits `mapstructure:"limits"`
	// Console configures the web console on the HTTP port.
	Console ConsoleConfig `mapstructure:"console"`
}

// ConsoleConfig is the config section console: the web console's charts
// and sessions (package console).
type ConsoleConfig struct {
	// SampleInterval is how often the node samples its counters for the
	// console's charts; History how far back the samples go (a ring of
	// History/SampleInterval samples in memory).
	SampleInterval time.Duration `mapstructure:"sample_interval"`
	History        time.Duration `mapstructure:"history"`
	// SessionIdle ends a console session unused this long.
	SessionIdle time.Duration `mapstructure:"session_idle"`
}

// maxConsoleSamples bounds the console's ring of samples.
const maxConsoleSamples = 100_000

// validate checks the console section; the error names the key.
func (c ConsoleConfig) validate() error {
	switch {
	case c.SampleInterval < 10*time.Millisecond:
		return fmt.Errorf("sample_interval %v must be at least 10ms", c.SampleInterval)
	case c.History < c.SampleInterval:
		return fmt.Errorf("history %v must be at least sample_interval %v", c.History, c.SampleInterval)
	case c.History/c.SampleInterval > maxConsoleSamples:
		return fmt.Errorf("history %v holds more than %d samples of sample_interval %v", c.History, maxConsoleSamples, c.SampleInterval)
	case c.SessionIdle <= 0:
		return fmt.Errorf("session_idle %v must be positive", c.SessionIdle)
	}
	return nil
}

// Limits are the bounds of the node's RPC port (config limits; see
// rpc.ServerOptions for each): a client that floods requests, holds
// connections or does not read its answers cannot exhaust the node.
type Limits struct {
	MaxFrameSize         int           `mapstructure:"max_frame_size"`
	MaxConns             int           `mapstructure:"max_conns"`
	MaxConnsPerClient    int           `mapstructure:"max_conns_per_client"`
	MaxConcurrent        int           `mapstructure:"max_concurrent"`
	MaxConcurrentPerConn int           `mapstructure:"max_concurrent_per_conn"`
	HandshakeTimeout     time.Duration `mapstructure:"handshake_timeout"`
	IdleTimeout          time.Duration `mapstructure:"idle_timeout"`
	WriteTimeout         time.Duration `mapstructure:"write_timeout"`
}

// defaultLimits are rpc.ServerOptions' defaults.
func defaultLimits() Limits {
	d := rpc.DefaultServerOptions()
	return Limits{MaxFrameSize: d.MaxFrameSize, MaxConns: d.MaxConns, MaxConnsPerClient: d.MaxConnsPerClient,
		MaxConcurrent: d.MaxConcurrent, MaxConcurrentPerConn: d.MaxConcurrentPerConn,
		HandshakeTimeout: d.HandshakeTimeout, IdleTimeout: d.IdleTimeout, WriteTimeout: d.WriteTimeout}
}

// validate checks the limits; the error names the key.
func (l Limits) validate() error {
	for _, f := range []struct {
		key string
		v   int64
	}{{"max_conns", int64(l.MaxConns)}, {"max_conns_per_client", int64(l.MaxConnsPerClient)},
		{"max_concurrent", int64(l.MaxConcurrent)}, {"max_concurrent_per_conn", int64(l.MaxConcurrentPerConn)},
		{"handshake_timeout", int64(l.HandshakeTimeout)}, {"write_timeout", int64(l.WriteTimeout)}} {
		if f.v <= 0 {
			return fmt.Errorf("%s must be positive", f.key)
		}
	}
	switch {
	case l.MaxFrameSize < rpc.MinMaxFrameSize:
		return fmt.Errorf("max_frame_size %d must be at least %d bytes", l.MaxFrameSize, rpc.MinMaxFrameSize)
	case l.MaxConcurrentPerConn > l.MaxConcurrent:
		return fmt.Errorf("max_concurrent_per_conn %d must not exceed max_concurrent %d", l.MaxConcurrentPerConn, l.MaxConcurrent)
	case l.IdleTimeout == 0:
		return fmt.Errorf("idle_timeout must not be 0 (a negative value: never close idle connections)")
	}
	return nil
}

// serverOptions returns the RPC server options of the limits.
func (l Limits) serverOptions() rpc.ServerOptions {
	return rpc.ServerOptions{MaxFrameSize: l.MaxFrameSize, MaxConns: l.MaxConns, MaxConnsPerClient: l.MaxConnsPerClient,
		MaxConcurrent: l.MaxConcurrent, MaxConcurrentPerConn: l.MaxConcurrentPerConn,
		HandshakeTimeout: l.HandshakeTimeout, IdleTimeout: l.IdleTimeout, WriteTimeout: l.WriteTimeout}
}

// DefaultConfig returns the defaults documented in docs/operations.md, "Configuration".
func DefaultConfig() Config {
	rt := namespace.DefaultRouting()
	return Config{
		BindAddr:           "127.0.0.1",
		Ports:              Ports{RPC: 7400, Raft: 7401, Serf: 7402, HTTP: 7403},
		Group:              GroupAuto,
		MaxGroupSize:       7,
		Replication:        3,
		ReplicaRepairAfter: 10 * time.Minute,
		ShardLogStore:      shard.LogStoreWAL,
		BitsPerFile:        rt.BitsPerFile,
		FilterCapacity:     rt.FilterCapacity,
		LRUEntries:         rt.LRUEntries,
		LRUBitsPerFile:     rt.LRUBitsPerFile,
		L1Admission:        rt.L1Admission,
		FilterMemoryMB:     DefaultFilterMemoryMB(),
		ACL:                acl.Config{}.WithDefaults(),
		Limits:             defaultLimits(),
		Console: ConsoleConfig{SampleInterval: console.DefaultSampleInterval, History: console.DefaultHistory,
			SessionIdle: console.DefaultSessionIdle},
		PropagateThreshold:  rt.PropagateThreshold,
		PropagateInterval:   rt.PropagateInterval,
		Placement:           namespace.PlacementColocate,
		PlacementSpread:     namespace.DefaultSpreadAfter,
		Scheme:              namespace.SchemeAuto,
		CacheLease:          DefaultCacheLease,
		DataGCGrace:         namespace.DefaultDataGCGrace,
		StopHandOverTimeout: DefaultStopHandOverTimeout,
		LogLevel:            "info",
	}
}

// DefaultStopHandOverTimeout is the default stop_handover_timeout.
const DefaultStopHandOverTimeout = 10 * time.Second

// DefaultCacheLease is the default cache_lease: the leases under which
// clients cache inodes (a write waits at most this long for a client that
// does not acknowledge its invalidation, and a new shard leader's first
// writes wait this long).
const DefaultCacheLease = 2 * time.Second

// DefaultFilterMemoryMB is the default filter_memory_mb: 1/32 of the
// machine's memory (at least 64 MiB; 256 MiB where it cannot be read),
// enough on a machine of a few GiB for a few hundred replicas of the
// default 1 MB filters, so that clusters of up to that size route like HBA.
func DefaultFilterMemoryMB() int {
	total := machineMemory()
	if total == 0 {
		return 256
	}
	return max(int(total>>20)/32, 64)
}

// Routing returns the filter configuration the namespace and the group's
// FSM use (the same on every node of a cluster).
func (c *Config) Routing() namespace.Routing {
	return namespace.Routing{
		BitsPerFile:        c.BitsPerFile,
		FilterCapacity:     c.FilterCapacity,
		LRUEntries:         c.LRUEntries,
		LRUBitsPerFile:     c.LRUBitsPerFile,
		L1Admission:        c.L1Admission,
		PropagateThreshold: c.PropagateThreshold,
		PropagateInterval:  c.PropagateInterval,
		Hash:               routing.HashXX,
	}
}

// ErrConfig is wrapped by every validation error; the message names the key.
var ErrConfig = errors.New("invalid config")

var nodeIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// Validate checks every key and returns an error naming the first bad one.
func (c *Config) Validate() error {
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrConfig, key, fmt.Sprintf(format, a...))
	}
	switch {
	case !nodeIDRe.MatchString(c.NodeID):
		return bad("node_id", "%q must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", c.NodeID)
	case c.DataDir == "":
		return bad("data_dir", "is required")
	case net.ParseIP(c.BindAddr) == nil:
		return bad("bind_addr", "%q is not an IP address", c.BindAddr)
	}
	if c.AdvertiseAddr != "" {
		ip := net.ParseIP(c.AdvertiseAddr)
		if ip == nil || ip.IsUnspecified() {
			return bad("advertise_addr", "%q must be a concrete IP address", c.AdvertiseAddr)
		}
	} else if ip := net.ParseIP(c.BindAddr); ip.IsUnspecified() {
		return bad("advertise_addr", "is required when bind_addr is %s", c.BindAddr)
	}
	ports := map[string]int{"ports.rpc": c.Ports.RPC, "ports.raft": c.Ports.Raft, "ports.serf": c.Ports.Serf, "ports.http": c.Ports.HTTP}
	seen := map[int]string{}
	for _, k := range []string{"ports.rpc", "ports.raft", "ports.serf", "ports.http"} {
		p := ports[k]
		if p < 1 || p > 65535 {
			return bad(k, "%d is not a port (1-65535)", p)
		}
		if other, dup := seen[p]; dup {
			return bad(k, "%d is also %s", p, other)
		}
		seen[p] = k
	}
	if c.Group != GroupAuto && !nodeIDRe.MatchString(c.Group) {
		return bad("group", "%q must be %q or a name of letters, digits, '.', '_' or '-'", c.Group, GroupAuto)
	}
	for _, a := range c.RetryJoin {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return bad("retry_join", "%q is not host:port", a)
		}
	}
	switch {
	case c.MaxGroupSize == GroupSizeAuto && c.Group != GroupAuto:
		return bad("max_group_size", "auto needs group: %s (a group of fixed name never splits)", GroupAuto)
	case c.MaxGroupSize != GroupSizeAuto && (c.MaxGroupSize < 1 || c.MaxGroupSize > maxGroupCap):
		return bad("max_group_size", "%d must be 1-%d or auto", c.MaxGroupSize, maxGroupCap)
	case c.Replication < 1 || c.Replication > 64:
		return bad("replication", "%d must be 1-64 (copies of each shard; 1 keeps a single home)", c.Replication)
	case c.ReplicaRepairAfter <= 0:
		return bad("replica_repair_after", "%v must be positive", c.ReplicaRepairAfter)
	case !(c.BitsPerFile >= 1 && c.BitsPerFile <= 64):
		return bad("bits_per_file", "%v must be 1-64", c.BitsPerFile)
	case c.FilterCapacity < 1 || c.FilterCapacity > 1<<32:
		return bad("filter_capacity", "%d must be 1-2^32", c.FilterCapacity)
	case c.LRUEntries < 0 || c.LRUEntries > 1<<24:
		return bad("lru_entries", "%d must be 0-16777216", c.LRUEntries)
	case !(c.LRUBitsPerFile >= 1 && c.LRUBitsPerFile <= 64):
		return bad("lru_bits_per_file", "%v must be 1-64", c.LRUBitsPerFile)
	case c.L1Admission != namespace.L1AdmitLRU && c.L1Admission != namespace.L1AdmitFrequency:
		return bad("l1_admission", "%q must be lru or frequency", c.L1Admission)
	case c.FilterMemoryMB < 0 || c.FilterMemoryMB > 1<<20:
		return bad("filter_memory_mb", "%d must be 0-1048576 (MiB of filter replicas; 0 holds the G-HBA segment alone)", c.FilterMemoryMB)
	case !(c.PropagateThreshold > 0 && c.PropagateThreshold <= 1):
		return bad("propagate_threshold", "%v must be a fraction in (0, 1]", c.PropagateThreshold)
	case c.PropagateInterval <= 0:
		return bad("propagate_interval", "%v must be positive", c.PropagateInterval)
	case c.CacheLease < 0 || c.CacheLease > time.Minute:
		return bad("cache_lease", "%v must be 0-1m (0: clients may not cache inodes)", c.CacheLease)
	case c.DataGCGrace < time.Second || c.DataGCGrace > 90*24*time.Hour:
		return bad("data_gc_grace", "%v must be 1s-2160h (how long unreferenced content objects stay before they are deleted)", c.DataGCGrace)
	case c.StopHandOverTimeout < 0 || c.StopHandOverTimeout > 10*time.Minute:
		return bad("stop_handover_timeout", "%v must be 0-10m (0: a stop hands no shard leadership over)", c.StopHandOverTimeout)
	}
	if !slices.Contains(shard.LogStores, c.ShardLogStore) {
		return bad("shard_log_store", "%q must be one of %s", c.ShardLogStore, strings.Join(shard.LogStores, ", "))
	}
	if !slices.Contains(namespace.Placements(), c.Placement) {
		return bad("placement", "%q must be one of %s", c.Placement, strings.Join(namespace.Placements(), ", "))
	}
	if c.PlacementSpread <= 0 {
		return bad("placement_spread", "%d must be positive", c.PlacementSpread)
	}
	if !slices.Contains(namespace.Schemes(), c.Scheme) {
		return bad("scheme", "%q must be one of %s", c.Scheme, strings.Join(namespace.Schemes(), ", "))
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		return bad("log_level", "%q must be debug, info, warn or error", c.LogLevel)
	}
	if err := c.TLS.Validate(true); err != nil {
		return bad("tls", "%v", err)
	}
	if _, err := c.GossipKey(); err != nil {
		return bad("encrypt", "%v", err)
	}
	if err := c.ACL.Validate(); err != nil {
		return bad("acl", "%v", err)
	}
	if err := c.Limits.validate(); err != nil {
		return bad("limits", "%v", err)
	}
	if err := c.Console.validate(); err != nil {
		return bad("console", "%v", err)
	}
	if !filepath.IsAbs(c.DataDir) {
		abs, err := filepath.Abs(c.DataDir)
		if err != nil {
			return bad("data_dir", "%v", err)
		}
		c.DataDir = abs
	}
	return nil
}

// GossipKey returns the decoded Encrypt key, nil when none is set.
func (c *Config) GossipKey() ([]byte, error) {
	if c.Encrypt == "" {
		return nil, nil
	}
	key, err := base64.StdEncoding.DecodeString(c.Encrypt)
	if err != nil {
		return nil, fmt.Errorf("not base64 (make a key with ghba keygen): %w", err)
	}
	switch len(key) {
	case 16, 24, 32:
		return key, nil
	}
	return nil, fmt.Errorf("a key of %d bytes; it must have 16, 24 or 32 (ghba keygen)", len(key))
}

// Advertise returns the address other nodes use to reach this one.
func (c *Config) Advertise() string {
	if c.AdvertiseAddr != "" {
		return c.AdvertiseAddr
	}
	return c.BindAddr
}
