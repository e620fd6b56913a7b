package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/serf/serf"

	"github.com/ghba/ghba/fsm"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// Version gates (docs/design.md, "Upgrades and unknown commands"). Every
// node gossips the formats its build speaks (tagVersions) and its build
// (tagBuild). A shard leader writes the newest shard log format only once
// every member of the cluster speaks it (logFormat): until then it keeps
// writing the older one, which every member applies. Once every member
// speaks it, the format is "in use": the node records that in its data
// directory and gossips it (tagFormat), and it never goes back. A node
// whose build speaks less than a format in use refuses to start (the
// record in its data directory), or stops as soon as gossip shows the
// format in use (a node with a new data directory): a downgrade past a
// format change is never silent.

// Serf tags of the version gates.
const (
	tagBuild    = "build" // the build (module version) of the node's binary
	tagVersions = "ver"   // the formats the build speaks (formatVersions)
	tagFormat   = "fmt"   // the newest shard log format the node knows in use
)

// metaLogFormat records, in the node's own store, the newest shard log
// format known to be in use in the cluster.
const metaLogFormat = "formats/shard_log"

// The formats of this build, besides the shard log's (store.MaxBatchFormat).
const (
	groupLogFormat      = fsm.FormatV3 // the group FSM's commands
	groupSnapshotFormat = 2            // the group FSM's snapshots
	shardSnapshotFormat = 1            // a shard's snapshots (store backups)
	rpcProtocol         = 1            // the RPC preface (rpc/internal/wire)
)

// ErrFormat reports a format in use in the cluster that this build does
// not speak (a downgrade past a format change).
var ErrFormat = errors.New("node: a format in use is newer than this build speaks")

// WithLogFormatPin makes the node speak shard log format v at most
// (advertise, write and apply): a test-only stand-in for a build that knows
// no newer one (the rolling-upgrade tests; the agent sets it from
// GHBA_TEST_PIN_LOG_FORMAT).
func WithLogFormatPin(v byte) Option {
	return func(n *Node) { n.formats.pin = v }
}

// formatState is the node's view of the version gates.
type formatState struct {
	pin   byte          // WithLogFormatPin; 0: none
	inUse atomic.Uint32 // the newest shard log format known in use
	write atomic.Uint32 // the shard log format leaders write now
	// refused is set once a format in use newer than this build was seen.
	refused atomic.Bool
	// candidate is the format in use that the last round computed from
	// the members and did not adopt yet (updateFormats); 0: none.
	candidate atomic.Uint32
}

// speaksLog returns the newest shard log format this node speaks.
func (n *Node) speaksLog() byte {
	if p := n.formats.pin; p != 0 && p < store.MaxBatchFormat {
		return p
	}
	return store.MaxBatchFormat
}

// logFormat returns the shard log format the leaders of this node write
// now (shard.Options.LogFormat).
func (n *Node) logFormat() byte {
	v := byte(n.formats.write.Load())
	return max(min(v, n.speaksLog()), store.BatchFormatV1)
}

// formatVersions returns the formats this node speaks, as gossiped.
func (n *Node) formatVersions() map[string]int {
	return map[string]int{
		"log": int(n.speaksLog()), "snap": shardSnapshotFormat,
		"glog": int(groupLogFormat), "gsnap": groupSnapshotFormat, "rpc": rpcProtocol,
	}
}

// encodeVersions renders versions as a tag: "glog=3,gsnap=2,log=2,...".
func encodeVersions(v map[string]int) string {
	parts := make([]string, 0, len(v))
	for k, x := range v {
		parts = append(parts, k+"="+strconv.Itoa(x))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// parseVersions reads a tagVersions value; nil when absent or unreadable.
func parseVersions(s string) map[string]int {
	if s == "" {
		return nil
	}
	out := map[string]int{}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		x, err := strconv.Atoi(v)
		if !ok || err != nil {
			continue
		}
		out[k] = x
	}
	return out
}

// memberLogFormat returns the shard log format a member speaks: 1 for a
// member that gossips no versions (a build before the version gates, or
// one whose tags have not arrived: the conservative answer).
func memberLogFormat(tags map[string]string) byte {
	if v := parseVersions(tags[tagVersions])["log"]; v > 0 && v <= 255 {
		return byte(v)
	}
	return store.BatchFormatV1
}

// loadFormats reads the format in use recorded in the data directory and
// refuses a build that does not speak it.
func (n *Node) loadFormats(ctx context.Context) error {
	s, err := n.getMeta(ctx, metaLogFormat)
	if err != nil {
		return err
	}
	inUse := uint64(0)
	if s != "" {
		if inUse, err = strconv.ParseUint(s, 10, 8); err != nil {
			return fmt.Errorf("node: bad %s record %q: %w", metaLogFormat, s, err)
		}
	}
	if speaks := n.speaksLog(); inUse > uint64(speaks) {
		return fmt.Errorf("%w: data_dir %s: shard log format %d is in use in this cluster, and this build (%s) speaks formats up to %d; "+
			"a downgrade past a format change is refused: run a build that speaks shard log format %d or newer",
			ErrFormat, n.cfg.DataDir, inUse, buildVersion(), speaks, inUse)
	}
	n.formats.inUse.Store(uint32(inUse))
	n.formats.write.Store(uint32(max(inUse, uint64(store.BatchFormatV1))))
	return nil
}

// updateFormats recomputes the version gate from the members' tags (the
// readiness loop calls it): the format in use rises to the newest that
// every member that is not gone speaks (once the node serves, and two
// rounds in a row), or to one another member knows in use; it is recorded
// and gossiped. A format in use newer than this build speaks stops the
// node.
func (n *Node) updateFormats(ctx context.Context) {
	sa := n.serfAgent()
	if sa == nil || n.formats.refused.Load() || !n.isJoined() {
		return // (not joined: the members it sees may not be all)
	}
	speaks := n.speaksLog()
	all := speaks
	inUse := byte(n.formats.inUse.Load())
	seenBy := ""
	seen := map[string]string{} // what each member speaks, for the log
	for _, m := range sa.Members() {
		if m.Tags[tagRole] != roleGHBA || m.Name == n.cfg.NodeID || m.Status == serf.StatusLeft {
			continue
		}
		all = min(all, memberLogFormat(m.Tags))
		seen[m.Name] = fmt.Sprintf("%d (%s, in use %s)", memberLogFormat(m.Tags), m.Status, cmp.Or(m.Tags[tagFormat], "-"))
		if u, err := strconv.ParseUint(m.Tags[tagFormat], 10, 8); err == nil && byte(u) > inUse {
			inUse, seenBy = byte(u), m.Name
		}
	}
	if !n.groupCaughtUp() {
		// Right after a restart the group FSM replays its log: a member
		// it does not show yet, and Serf neither, would be missed.
		all = min(all, byte(max(n.formats.inUse.Load(), uint32(store.BatchFormatV1))))
	} else if f := n.groupFSM(); f != nil {
		// A member of the group Serf does not show yet counts as old.
		for _, m := range f.Members() {
			if m.ID == n.cfg.NodeID {
				continue
			}
			if _, ok := serfMember(sa, m.ID); !ok {
				all = store.BatchFormatV1
			}
		}
	}
	adopted := inUse // known in use by another member, or recorded here
	inUse = max(inUse, all)
	if inUse > speaks {
		n.formats.refused.Store(true)
		n.fail(fmt.Errorf("%w: shard log format %d is in use in this cluster (node %s), and this build (%s) speaks formats up to %d; "+
			"a downgrade past a format change is refused: run a build that speaks shard log format %d or newer",
			ErrFormat, inUse, seenBy, buildVersion(), speaks, inUse))
		return
	}
	if uint32(inUse) <= n.formats.inUse.Load() {
		n.formats.candidate.Store(0)
		return
	}
	if inUse > adopted {
		// A rise this node computed itself needs a settled view of the
		// members: it serves (its group's state and shards are caught
		// up, so Serf has had time to merge every member after a
		// restart), and two rounds in a row found the same.
		if ok, _ := n.serving(); !ok || n.formats.candidate.Swap(uint32(inUse)) != uint32(inUse) {
			return
		}
	}
	n.formats.candidate.Store(0)
	var b store.Batch
	b.SetMeta(metaLogFormat, []byte(strconv.Itoa(int(inUse))))
	if err := n.store.Commit(ctx, &b); err != nil {
		n.log.Warn("recording the shard log format in use", "err", err)
		return
	}
	prev := n.formats.inUse.Swap(uint32(inUse))
	n.formats.write.Store(uint32(inUse))
	n.log.Info("shard log format in use: every member speaks it", "format", inUse, "was", prev, "members", seen)
	if err := n.updateTags(); err != nil {
		n.log.Warn("updating serf tags", "err", err)
	}
}

// serfMember returns the Serf member named id.
func serfMember(sa *serf.Serf, id string) (serf.Member, bool) {
	for _, m := range sa.Members() {
		if m.Name == id {
			return m, true
		}
	}
	return serf.Member{}, false
}

// versionTags adds the version gates' tags to tags.
func (n *Node) versionTags(tags map[string]string) {
	if b := buildVersion(); b != "" {
		tags[tagBuild] = b
	}
	tags[tagVersions] = encodeVersions(n.formatVersions())
	if v := n.formats.inUse.Load(); v > 0 {
		tags[tagFormat] = strconv.Itoa(int(v))
	}
}

// memberVersions fills m's build and versions from a member's tags.
func memberVersions(m *rpc.Member, tags map[string]string) {
	m.Build, m.Versions = tags[tagBuild], parseVersions(tags[tagVersions])
	if u, err := strconv.Atoi(tags[tagFormat]); err == nil {
		m.LogFormatInUse = u
	}
}
