package raftconf_test

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/ghba/ghba/node/raftconf"
)

// TestConfig checks the configuration built from the default tuning
// against raft's defaults with the timers set, and that the options and
// snapshot settings reach it.
func TestConfig(t *testing.T) {
	notify := make(chan bool, 1)
	got := raftconf.Config(raftconf.DefaultTuning(), raftconf.Options{LocalID: "n1", Notify: notify})
	want := raft.DefaultConfig()
	want.LocalID = "n1"
	want.NotifyCh = notify
	want.HeartbeatTimeout, want.ElectionTimeout = time.Second, time.Second
	want.LeaderLeaseTimeout, want.CommitTimeout = 500*time.Millisecond, 50*time.Millisecond
	want.ShutdownOnRemove = false
	if got.Logger == nil {
		t.Fatal("no logger: raft would log to stderr")
	}
	got.Logger = nil
	if *got != *want {
		t.Fatalf("config\n got %+v\nwant %+v", *got, *want)
	}
	if err := raft.ValidateConfig(got); err != nil {
		t.Fatal(err)
	}

	tun := raftconf.Tuning{SnapshotThreshold: 32, SnapshotInterval: time.Second, TrailingLogs: 8}.WithDefaults()
	c := raftconf.Config(tun, raftconf.Options{LocalID: "n2", ShutdownOnRemove: true, NoSnapshotRestoreOnStart: true})
	if c.SnapshotThreshold != 32 || c.SnapshotInterval != time.Second || c.TrailingLogs != 8 ||
		!c.ShutdownOnRemove || !c.NoSnapshotRestoreOnStart || c.HeartbeatTimeout != time.Second {
		t.Fatalf("config %+v", *c)
	}
}

// TestWithDefaults fills the zero timers only.
func TestWithDefaults(t *testing.T) {
	got := raftconf.Tuning{Heartbeat: 500 * time.Millisecond, Commit: -1}.WithDefaults()
	want := raftconf.DefaultTuning()
	want.Heartbeat = 500 * time.Millisecond
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}
