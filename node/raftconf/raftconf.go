// Package raftconf holds the Raft timers and snapshot settings of every
// hashicorp/raft instance of a node (its group Raft and its shard
// replicas), with their defaults, and builds their raft.Config from them:
// one place for what the two kinds of Raft share, and an explicit Options
// field for each setting in which they differ.
package raftconf

import (
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Tuning holds a Raft's timers and snapshot settings.
type Tuning struct {
	// Heartbeat, Election, LeaderLease and Commit are raft's
	// HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout and
	// CommitTimeout.
	Heartbeat, Election, LeaderLease, Commit time.Duration
	// ApplyTimeout bounds enqueueing one command (Apply, Barrier,
	// AddVoter, RemoveServer).
	ApplyTimeout time.Duration
	// SnapshotThreshold, SnapshotInterval and TrailingLogs are raft's
	// (0: raft's defaults).
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
}

// DefaultTuning returns the timers used outside tests, for the group Raft
// and the shard replicas alike (snapshot settings: raft's defaults).
func DefaultTuning() Tuning {
	return Tuning{
		Heartbeat:    time.Second,
		Election:     time.Second,
		LeaderLease:  500 * time.Millisecond,
		Commit:       50 * time.Millisecond,
		ApplyTimeout: 10 * time.Second,
	}
}

// WithDefaults returns t with its zero (or negative) timers set to
// DefaultTuning's; the snapshot settings stay as they are (0 is raft's
// default).
func (t Tuning) WithDefaults() Tuning {
	d := DefaultTuning()
	SetDefault(&t.Heartbeat, d.Heartbeat)
	SetDefault(&t.Election, d.Election)
	SetDefault(&t.LeaderLease, d.LeaderLease)
	SetDefault(&t.Commit, d.Commit)
	SetDefault(&t.ApplyTimeout, d.ApplyTimeout)
	return t
}

// SetDefault sets *v to def if it is zero or negative.
func SetDefault(v *time.Duration, def time.Duration) {
	if *v <= 0 {
		*v = def
	}
}

// Options are what a Raft's configuration takes besides its Tuning. The
// group Raft and the shard replicas set ShutdownOnRemove and
// NoSnapshotRestoreOnStart differently, so both are always given.
type Options struct {
	// LocalID is the Raft server id. Required.
	LocalID string
	// Logger receives raft's log lines (nil discards them).
	Logger hclog.Logger
	// Notify receives raft's leadership changes (raft.Config.NotifyCh).
	Notify chan bool
	// ShutdownOnRemove stops the Raft when it applies a configuration
	// that removes it (raft.Config.ShutdownOnRemove).
	ShutdownOnRemove bool
	// NoSnapshotRestoreOnStart skips restoring the newest snapshot into
	// the FSM when the Raft starts (raft.Config.NoSnapshotRestoreOnStart).
	NoSnapshotRestoreOnStart bool
}

// Config returns raft's configuration for a Raft tuned by t: raft's
// defaults, then o's settings, t's timers as they are (see WithDefaults)
// and its snapshot settings that are set.
func Config(t Tuning, o Options) *raft.Config {
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(o.LocalID)
	conf.Logger = o.Logger
	if conf.Logger == nil {
		conf.Logger = hclog.NewNullLogger()
	}
	conf.NotifyCh = o.Notify
	conf.HeartbeatTimeout = t.Heartbeat
	conf.ElectionTimeout = t.Election
	conf.LeaderLeaseTimeout = t.LeaderLease
	conf.CommitTimeout = t.Commit
	conf.ShutdownOnRemove = o.ShutdownOnRemove
	conf.NoSnapshotRestoreOnStart = o.NoSnapshotRestoreOnStart
	if t.SnapshotThreshold > 0 {
		conf.SnapshotThreshold = t.SnapshotThreshold
	}
	if t.SnapshotInterval > 0 {
		conf.SnapshotInterval = t.SnapshotInterval
	}
	if t.TrailingLogs > 0 {
		conf.TrailingLogs = t.TrailingLogs
	}
	return conf
}

// snapshotsRetained is how many snapshots a Raft's file snapshot store
// keeps.
const snapshotsRetained = 2

// SnapshotStore opens the file snapshot store of a Raft whose state is in
// dir, keeping the two newest snapshots, logging to l (nil: nowhere).
func SnapshotStore(dir string, l hclog.Logger) (*raft.FileSnapshotStore, error) {
	if l == nil {
		l = hclog.NewNullLogger()
	}
	return raft.NewFileSnapshotStoreWithLogger(dir, snapshotsRetained, l.Named("snapshot"))
}
