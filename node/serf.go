package node

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"
)

// Serf tags every ghba node gossips. Their total size stays far below
// Serf's 512-byte limit (checked by checkTags); filters are never gossiped,
// only addresses and small identifiers.
const (
	tagRole     = "role"    // always roleGHBA: ignore other members of the pool
	tagGroup    = "group"   // the node's group; "" until it has joined one
	tagRPC      = "rpc"     // host:port of the RPC server
	tagRaft     = "raft"    // host:port of the group's Raft transport
	tagHTTP     = "http"    // host:port of the HTTP server
	tagRoot     = "root"    // "epoch/id" of the node homing "/", once known
	tagLeaving  = "leaving" // "1" while the node drains its files (ghba leave)
	tagMoving   = "moving"  // "1" while the node switches groups (split, merge)
	tagAuto     = "auto"    // "1" on nodes configured with group auto (they may be moved)
	tagHost     = "host"    // the shards this node hosts a replica of, comma-separated
	tagLead     = "lead"    // the shards this node leads, comma-separated
	tagInc      = "inc"     // the incarnation of the node's data directory (shard.ReplicaID)
	tagServing  = "serving" // "1" while the node serves every request it accepts (readyLoop)
	tagMaxGroup = "maxg"    // the M its group applies, on the leader of a group of auto size (groupsize.go)

	roleGHBA = "ghba"

	// maxTagBytes is Serf's limit on the encoded tags of one member.
	maxTagBytes = 512

	// deadNodeReclaimTime is how long a failed member's address must
	// have been dead before the same node id may come back at another.
	deadNodeReclaimTime = 5 * time.Second
)

// Member statuses reported by Members and the status page.
const (
	statusAlive    = "alive"
	statusStarting = "starting" // Serf-alive, not serving yet (readiness)
	statusFailed   = "failed"
	statusLeaving  = "leaving"
	statusLeft     = "left"
)

// serfStatus names a Serf member status as ghba reports it.
func serfStatus(s serf.MemberStatus) string {
	switch s {
	case serf.StatusAlive:
		return statusAlive
	case serf.StatusLeaving:
		return statusLeaving
	case serf.StatusLeft:
		return statusLeft
	case serf.StatusFailed:
		return statusFailed
	}
	return "none"
}

// checkTags returns an error if tags would exceed Serf's size limit. The
// estimate (each key and value plus 4 bytes of msgpack framing) is an
// upper bound of the encoding Serf uses.
func checkTags(tags map[string]string) error {
	n := 1
	for k, v := range tags {
		n += len(k) + len(v) + 4
	}
	if n > maxTagBytes {
		return fmt.Errorf("serf tags of about %d bytes exceed %d", n, maxTagBytes)
	}
	return nil
}

// serfConfig builds the Serf (and memberlist) configuration of n.
func (n *Node) serfConfig(tags map[string]string) (*serf.Config, error) {
	conf := serf.DefaultConfig()
	conf.Init()
	conf.NodeName = n.cfg.NodeID
	conf.Tags = tags
	conf.EventCh = n.serfEvents
	conf.Logger = newStdLogger(n.log, "serf")
	conf.LogOutput = nil
	conf.SnapshotPath = filepath.Join(n.cfg.DataDir, "serf", "local.snapshot")
	conf.RejoinAfterLeave = false
	conf.EnableNameConflictResolution = true
	conf.ReconnectTimeout = n.tune.SerfReconnectTimeout
	conf.TombstoneTimeout = n.tune.SerfTombstoneTimeout
	conf.ReapInterval = n.tune.SerfReapInterval
	conf.ReconnectInterval = n.tune.SerfReconnectInterval
	conf.BroadcastTimeout = n.tune.SerfBroadcastTimeout
	conf.LeavePropagateDelay = n.tune.SerfLeavePropagateDelay
	if err := os.MkdirAll(filepath.Dir(conf.SnapshotPath), 0o755); err != nil {
		return nil, fmt.Errorf("serf: snapshot dir: %w", err)
	}

	ml := memberlist.DefaultLANConfig()
	ml.Name = n.cfg.NodeID
	ml.BindAddr = n.cfg.BindAddr
	ml.BindPort = n.cfg.Ports.Serf
	ml.AdvertiseAddr = n.cfg.Advertise()
	ml.AdvertisePort = n.cfg.Ports.Serf
	// A node that restarts at a new address (a container or pod with a
	// new IP) takes its name back once the old address has been dead this
	// long; memberlist's default, 0, never lets it (Consul sets 30 s).
	ml.DeadNodeReclaimTime = deadNodeReclaimTime
	ml.Logger = newStdLogger(n.log, "memberlist")
	ml.LogOutput = nil
	if t := n.tune; t.FastGossip {
		ml.ProbeInterval = 200 * time.Millisecond
		ml.ProbeTimeout = 100 * time.Millisecond
		ml.GossipInterval = 50 * time.Millisecond
		ml.PushPullInterval = 2 * time.Second
		ml.SuspicionMult = 2
		ml.SuspicionMaxTimeoutMult = 3
		ml.TCPTimeout = time.Second
		ml.DeadNodeReclaimTime = 100 * time.Millisecond
	}
	// With a keyring, memberlist encrypts and authenticates every gossip
	// message and refuses those it cannot decrypt: a node without one of
	// the keys cannot join (keyring.go).
	kr, err := n.gossipKeyring()
	if err != nil {
		return nil, fmt.Errorf("serf: %w", err)
	}
	if kr != nil {
		ml.Keyring = kr
		conf.KeyringFile = n.keyringPath()
	}
	conf.MemberlistConfig = ml
	return conf, nil
}

// startSerf creates the Serf agent (it binds the Serf port, TCP and UDP)
// and the goroutine draining its events.
func (n *Node) startSerf() error {
	conf, err := n.serfConfig(n.currentTags())
	if err != nil {
		return err
	}
	if err := checkTags(conf.Tags); err != nil {
		return err
	}
	s, err := serf.Create(conf)
	if err != nil {
		return fmt.Errorf("serf: start on %s:%d: %w", n.cfg.BindAddr, n.cfg.Ports.Serf, err)
	}
	n.tagsMu.Lock()
	n.serf, n.lastTags = s, conf.Tags
	n.tagsMu.Unlock()
	n.serfDone = make(chan struct{})
	n.bg.Go(n.drainSerfEvents)
	return nil
}

// currentTags returns the Serf tags describing n now.
func (n *Node) currentTags() map[string]string {
	adv := n.cfg.Advertise()
	tags := map[string]string{
		tagRole:  roleGHBA,
		tagGroup: n.advertisedGroup(),
		tagRPC:   net.JoinHostPort(adv, strconv.Itoa(n.cfg.Ports.RPC)),
		tagRaft:  net.JoinHostPort(adv, strconv.Itoa(n.cfg.Ports.Raft)),
		tagHTTP:  net.JoinHostPort(adv, strconv.Itoa(n.cfg.Ports.HTTP)),
		tagInc:   n.incarnation,
	}
	n.versionTags(tags)
	if r := n.dir.rootRecord(); r.id != "" {
		tags[tagRoot] = r.String()
	}
	if n.leaving.Load() {
		tags[tagLeaving] = "1"
	}
	if ok, _ := n.serving(); ok && !n.stopping.Load() {
		tags[tagServing] = "1"
	}
	if n.stopping.Load() {
		tags[tagStopping] = "1"
	}
	if n.cfg.Group == GroupAuto {
		tags[tagAuto] = "1"
	}
	if m := n.gossipedMaxGroup(); m != "" {
		tags[tagMaxGroup] = m
	}
	if n.shards != nil {
		hostedIDs, led := n.shards.hostedAndLed()
		if len(hostedIDs) > 0 {
			tags[tagHost] = shardsTag(hostedIDs)
		}
		if len(led) > 0 {
			tags[tagLead] = shardsTag(led)
		}
	}
	n.mu.Lock()
	if !n.joined && n.movingFrom != "" {
		tags[tagMoving] = "1"
	}
	n.mu.Unlock()
	return tags
}

// advertisedGroup is the group gossiped in Serf: only once the node is a
// member of it, so that others neither count it nor route to it before.
// A node switching groups keeps gossiping the group it leaves (with
// tagMoving) until it joined the new one, so that it stays routable: its
// files do not move.
func (n *Node) advertisedGroup() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.joined {
		return n.movingFrom
	}
	return n.groupName
}

// updateTags gossips n's current tags.
func (n *Node) updateTags() error {
	n.tagsMu.Lock()
	defer n.tagsMu.Unlock()
	if n.serf == nil {
		return nil
	}
	tags := n.currentTags()
	if checkTags(tags) != nil && tags[tagHost] != "" {
		// Many shards: the hosted list is the first to go (the Directory
		// also learns shards from the group's FSM and their leaders).
		n.log.Warn("serf tags too large: not gossiping the hosted shards", "host", tags[tagHost])
		delete(tags, tagHost)
	}
	if err := checkTags(tags); err != nil {
		return err
	}
	if maps.Equal(tags, n.lastTags) {
		return nil
	}
	if err := n.serf.SetTags(tags); err != nil {
		return fmt.Errorf("serf: set tags: %w", err)
	}
	n.lastTags = tags
	return nil
}

// drainSerfEvents reads Serf's event channel until Serf has shut down.
// It only records and signals: it never blocks on the network or on Raft,
// so Serf never waits for it.
func (n *Node) drainSerfEvents() {
	for {
		select {
		case ev := <-n.serfEvents:
			n.handleSerfEvent(ev)
		case <-n.serfDone:
			return
		}
	}
}

func (n *Node) handleSerfEvent(ev serf.Event) {
	me, ok := ev.(serf.MemberEvent)
	if !ok {
		return
	}
	for _, m := range me.Members {
		if m.Tags[tagRole] != roleGHBA {
			continue
		}
		n.log.Debug("serf member event", "event", me.Type.String(), "member", m.Name, "status", serfStatus(m.Status), "group", m.Tags[tagGroup])
		if me.Type == serf.EventMemberReap {
			n.dir.noteReaped(m.Name)
		}
	}
	n.metrics.serfEvents.WithLabelValues(me.Type.String()).Inc()
	n.signalRefresh() // never refresh here: it takes Serf's member lock
	n.triggerReconcile()
	n.triggerJoin()
}

// triggerReconcile asks the leader's reconcile loop to run soon (coalesced).
func (n *Node) triggerReconcile() {
	select {
	case n.reconcileCh <- struct{}{}:
	default:
	}
}

// serfAgent returns the Serf agent, nil before Start.
func (n *Node) serfAgent() *serf.Serf {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.serf
}

// serfMembers returns the members of the Serf pool as n sees them (every
// role), none before Start.
func (n *Node) serfMembers() []serf.Member {
	if s := n.serfAgent(); s != nil {
		return s.Members()
	}
	return nil
}
