// Package shard is one replica of a shard (docs/design.md, "Replicated
// shards"): a hashicorp/raft instance with a raft-boltdb/v2 log (synced:
// the point of durability), file snapshots, and a node/store Store opened
// without synced writes, applied by the shard's state machine (fsm.go).
// Its Raft traffic goes over a stream layer the node's raft multiplexer
// gives it (node/raftmux), so every replica of a node shares the raft
// port.
//
// A Replica implements namespace.Replica for the node to serve the shard
// while it leads; the node's shard manager also uses it to change the
// shard's Raft configuration and to move leadership.
package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/ghba/ghba/node/internal/tasks"
	"github.com/ghba/ghba/node/raftconf"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/node/textindex"
	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Tuning holds a replica's Raft timers and snapshot settings
// (raftconf.Tuning, shared with the node's group Raft) and the replica's
// own bounds.
type Tuning struct {
	raftconf.Tuning
	// ReadLease is how long after a successful leadership check the
	// leader answers further checks without a round (see verifier); 0:
	// Heartbeat/2; negative: no lease (every check runs a round). Capped
	// below Heartbeat.
	ReadLease time.Duration
	// ShutdownTimeout bounds Close's wait for Raft.
	ShutdownTimeout time.Duration
}

// DefaultTuning returns the timers used outside tests.
func DefaultTuning() Tuning {
	return Tuning{Tuning: raftconf.DefaultTuning(), ShutdownTimeout: 10 * time.Second}
}

// withDefaults returns t with its zero timers set to DefaultTuning's.
func (t Tuning) withDefaults() Tuning {
	t.Tuning = t.Tuning.WithDefaults()
	raftconf.SetDefault(&t.ShutdownTimeout, DefaultTuning().ShutdownTimeout)
	switch {
	case t.ReadLease == 0:
		t.ReadLease = t.Heartbeat / 2
	case t.ReadLease < 0:
		t.ReadLease = 0
	case t.ReadLease > t.Heartbeat*3/4:
		t.ReadLease = t.Heartbeat * 3 / 4
	}
	return t
}

// Options configure a replica.
type Options struct {
	// Shard is the shard's id. Required.
	Shard string
	// NodeID is the replica's Raft server id: the node's id, or
	// ReplicaID(node, incarnation). Required.
	NodeID string
	// Dir holds the replica's store (meta/) and Raft state (raft/).
	// Required.
	Dir string
	// Transport carries the replica's Raft traffic (a raft.NetworkTransport
	// over the node's multiplexed raft port). Required; Close closes it.
	Transport raft.Transport
	// LogStore is the store a new replica keeps its Raft log in
	// (LogStoreBoltDB if empty, or LogStoreWAL); a replica that has a log
	// keeps its store.
	LogStore string
	// Geometry is the geometry of the shard's counting filter (every
	// replica of every shard uses the node's namespace geometry).
	Geometry routing.Geometry
	// Logger receives the replica's log lines (nil discards them).
	Logger *slog.Logger
	// HCLogger, if set, receives raft's own log lines.
	HCLogger hclog.Logger
	// Tuning holds the timers (DefaultTuning's for those left zero).
	Tuning Tuning
	// Store adjusts the store's options (memory sizes in tests); Dir and
	// NoSyncWrites are set by the replica.
	Store store.Options
	// OnFatal is called once if the replica halts (a command this build
	// does not know, a store that failed); it must not block.
	OnFatal func(error)
	// LogFormat returns the newest batch format the replica may write
	// while it leads: the newest every replica of the shard speaks
	// (docs/design.md, "Upgrades and unknown commands"). Nil: the newest
	// this build speaks.
	LogFormat func() byte
	// MaxLogFormat pins the newest batch format the replica applies and
	// writes (0: store.MaxBatchFormat): a test-only stand-in for a build
	// that knows no newer one; an entry in a newer format halts it.
	MaxLogFormat byte
}

// Replica is one replica of a shard on this node. It is safe for
// concurrent use.
type Replica struct {
	id, node string
	dir      string
	log      *slog.Logger
	tune     Tuning

	st     *store.Store
	fsm    *fsm
	raft   *raft.Raft
	trans  raft.Transport
	logs   logStore
	notify chan bool
	exists bool

	verify verifier
	// maxBatch and logFormat: Options.MaxLogFormat (filled in) and
	// Options.LogFormat
	maxBatch  byte
	logFormat func() byte

	ctx    context.Context
	cancel context.CancelFunc
	tasks  tasks.Group
}

// Open opens the replica's store (completing interrupted re-keys and
// building the counting filter from it) and starts its Raft. A replica
// with no Raft state waits to be contacted by the shard's leader, unless
// Bootstrap makes it a shard of its own. ctx bounds the opening.
func Open(ctx context.Context, opts Options) (_ *Replica, err error) {
	switch {
	case opts.Shard == "" || opts.NodeID == "" || opts.Dir == "" || opts.Transport == nil:
		return nil, errors.New("shard: shard id, node id, dir and transport are required")
	}
	opts.Tuning = opts.Tuning.withDefaults()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Replica{id: opts.Shard, node: opts.NodeID, dir: opts.Dir, tune: opts.Tuning, trans: opts.Transport,
		log: opts.Logger.With("shard", opts.Shard), notify: make(chan bool, 16),
		maxBatch: store.MaxBatchFormat, logFormat: opts.LogFormat}
	if opts.MaxLogFormat != 0 {
		r.maxBatch = min(opts.MaxLogFormat, store.MaxBatchFormat)
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.verify.r, r.verify.lease = r, r.tune.ReadLease
	defer func() {
		if err != nil { // (r itself, not the result: that is nil)
			r.closeParts()
		}
	}()
	raftDir := filepath.Join(opts.Dir, "raft")
	if err := os.MkdirAll(raftDir, 0o755); err != nil {
		return nil, fmt.Errorf("shard %s: %w", r.id, err)
	}
	st, err := r.openState(ctx, opts)
	if err != nil {
		return nil, err
	}
	hl := opts.HCLogger
	if hl == nil {
		hl = hclog.NewNullLogger()
	}
	snaps, kind, err := r.openRaftStorage(raftDir, opts.LogStore, hl, st)
	if err != nil {
		return nil, err
	}
	conf := raftconf.Config(r.tune.Tuning, raftconf.Options{
		LocalID: opts.NodeID, Logger: hl, Notify: r.notify,
		// A leader that removes itself from the shard stops. (A removed
		// follower is not told: raft stops replicating to it, and it
		// loses track of the leader once its heartbeat times out. The
		// node learns of the removal from the shard's leader and
		// deletes the replica.)
		ShutdownOnRemove: true,
		// The store keeps its own applied index: replaying the log after
		// the last snapshot skips what it already holds, and a snapshot
		// is restored only to a replica that is behind the log (or whose
		// store a restore left incomplete).
		NoSnapshotRestoreOnStart: !st.restore,
	})
	if err := r.awaitOldLease(ctx); err != nil {
		return nil, err
	}
	logs, err := raft.NewLogCache(logCacheEntries, r.logs)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", r.id, err)
	}
	if r.raft, err = raft.NewRaft(conf, r.fsm, logs, r.logs, snaps, r.trans); err != nil {
		return nil, fmt.Errorf("shard %s: raft: %w", r.id, err)
	}
	applied, _ := r.st.AppliedIndex(ctx)
	r.log.Info("shard replica opened", "paths", st.files, "applied_index", applied, "raft_state", r.exists, "log_store", kind,
		"texts_indexed", r.fsm.text.Count())
	return r, nil
}

// openedState is what openState found in the replica's store.
type openedState struct {
	// restore is set when the store's last restore did not finish
	// (broken is then its error): Raft must restore it from its newest
	// snapshot.
	restore bool
	broken  error
	files   int // the paths the counting filter was built from
}

// openState opens the replica's store and text index and sets up its
// state machine: the counting filter and, if it was not closed at the
// store's applied index, the text index are rebuilt from one scan of the
// store, after completing interrupted re-keys.
func (r *Replica) openState(ctx context.Context, opts Options) (st openedState, err error) {
	so := opts.Store
	so.Dir, so.NoSyncWrites = filepath.Join(opts.Dir, "meta"), true
	if so.Logger == nil {
		so.Logger = r.log
	}
	if r.st, err = store.Open(ctx, so); err != nil {
		return st, fmt.Errorf("shard %s: %w", r.id, err)
	}
	r.fsm = &fsm{shard: r.id, st: r.st, log: r.log, ctx: r.ctx, geo: opts.Geometry, onFatal: opts.OnFatal,
		maxBatch: r.maxBatch}
	// A store left by a restore that did not finish (the process stopped
	// while it installed a snapshot, which Raft stores before restoring
	// it) refuses every call but a restore: Raft restores it from its
	// newest snapshot when it starts (Open), then replays the log.
	applied, broken := r.st.AppliedIndex(ctx)
	st.restore, st.broken = errors.Is(broken, store.ErrRestoreIncomplete), broken
	// The text index is kept if it was closed at the store's applied
	// index, else rebuilt below from the same scan as the filter.
	rebuildText := false
	if r.fsm.text, rebuildText, err = textindex.Open(filepath.Join(opts.Dir, "text"), applied); err != nil {
		return st, fmt.Errorf("shard %s: %w", r.id, err)
	}
	switch {
	case st.restore:
		r.fsm.filter = routing.NewCountingFilter(opts.Geometry)
		r.log.Warn("the store's last restore did not finish: restoring it from the newest snapshot", "err", broken)
	case broken != nil:
		return st, fmt.Errorf("shard %s: %w", r.id, broken)
	default:
		if err := r.st.ResumeRekey(ctx, nil); err != nil {
			return st, fmt.Errorf("shard %s: resuming re-keys: %w", r.id, err)
		}
		if st.files, err = r.fsm.rebuild(ctx, rebuildText); err != nil {
			return st, err
		}
	}
	return st, nil
}

// openRaftStorage opens the replica's Raft log store (of the kind it was
// created with; configured, for a new replica) and its snapshot store in
// dir, and reads whether Raft has state. It returns the snapshot store and
// the log store's kind.
func (r *Replica) openRaftStorage(dir, configured string, hl hclog.Logger, st openedState) (_ *raft.FileSnapshotStore, kind string, err error) {
	if r.logs, kind, err = openLogStore(dir, configured, hl); err != nil {
		return nil, "", fmt.Errorf("shard %s: log store: %w", r.id, err)
	}
	if configured != "" && kind != configured {
		r.log.Warn("the replica keeps the log store it was created with", "log_store", kind, "configured", configured)
	}
	snaps, err := raftconf.SnapshotStore(dir, hl)
	if err != nil {
		return nil, "", fmt.Errorf("shard %s: snapshot store: %w", r.id, err)
	}
	if r.exists, err = raft.HasExistingState(r.logs, r.logs, snaps); err != nil {
		return nil, "", fmt.Errorf("shard %s: reading raft state: %w", r.id, err)
	}
	if st.restore {
		if list, err := snaps.List(); err != nil || len(list) == 0 {
			return nil, "", fmt.Errorf("shard %s: no snapshot to restore the store from (%v): %w", r.id, err, st.broken)
		}
	}
	return snaps, kind, nil
}

// awaitOldLease waits, for a replica that was a member of the shard
// before, until a read lease resting on its acknowledgement before it
// stopped has run out: a lease the shard's leader holds may rest on it,
// so it votes only then (see verifier).
func (r *Replica) awaitOldLease(ctx context.Context) error {
	if !r.exists || r.tune.ReadLease <= 0 {
		return nil
	}
	select {
	case <-time.After(r.tune.ReadLease):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("shard %s: %w", r.id, ctx.Err())
	}
}

// HasState reports whether the replica had Raft state when opened (it was
// a member of the shard before).
func (r *Replica) HasState() bool { return r.exists }

// Bootstrap makes this replica a new shard whose voters are this replica
// and others (none: this replica alone). Only the node that creates the
// shard calls it, once, on a replica without state; the others' replicas
// have no configuration, so they never start an election, and this one is
// the shard's first leader.
func (r *Replica) Bootstrap(others ...Server) error {
	if r.exists {
		return nil
	}
	boot := raft.Configuration{Servers: []raft.Server{{
		Suffrage: raft.Voter, ID: raft.ServerID(r.node), Address: r.trans.LocalAddr(),
	}}}
	for _, o := range others {
		if o.ID != r.node {
			boot.Servers = append(boot.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(o.ID), Address: raft.ServerAddress(o.Addr)})
		}
	}
	if err := r.raft.BootstrapCluster(boot).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("shard %s: bootstrap: %w", r.id, err)
	}
	return nil
}

// Close stops the replica: Raft (bounded by Tuning.ShutdownTimeout), the
// transport, the log store and the store.
func (r *Replica) Close(ctx context.Context) error {
	var errs []error
	if r.raft != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.tune.ShutdownTimeout)
		if err := waitFuture(sctx, nil, r.raft.Shutdown()); err != nil { // (also when closed before)
			errs = append(errs, fmt.Errorf("shard %s: raft shutdown: %w", r.id, err))
		}
		cancel()
	}
	errs = append(errs, r.closeParts())
	return errors.Join(errs...)
}

// closeParts closes what Open opened besides Raft.
func (r *Replica) closeParts() error {
	var errs []error
	r.tasks.Close()
	r.cancel()
	r.tasks.Wait()
	if c, ok := r.trans.(raft.WithClose); ok {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("shard %s: transport: %w", r.id, err))
		}
	}
	if r.logs != nil {
		if err := r.logs.Close(); err != nil {
			errs = append(errs, fmt.Errorf("shard %s: log store: %w", r.id, err))
		}
	}
	if r.fsm != nil && r.fsm.text != nil && r.fsm.text.Active() { // (closed once: no longer active)
		// Raft has stopped: the index holds every entry up to the
		// store's applied index (unless it failed, see textindex).
		applied, err := r.st.AppliedIndex(context.Background())
		if err == nil {
			err = r.fsm.text.Close(applied)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("shard %s: %w", r.id, err))
		}
	}
	if r.st != nil {
		if err := r.st.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Shard returns the shard's id.
func (r *Replica) Shard() string { return r.id }

// SearchText returns the paths at or below root whose indexed text holds
// every word of words, best first, hits from..from+size of total
// (textindex.Index.Search). Every replica answers from the entries it has
// applied; the leader's answer is as fresh as its store.
func (r *Replica) SearchText(ctx context.Context, words, root string, from, size int) (paths []string, total uint64, err error) {
	return r.fsm.text.Search(ctx, words, root, from, size)
}

// TextsIndexed returns the number of files in the replica's text index.
func (r *Replica) TextsIndexed() uint64 { return r.fsm.text.Count() }

// Store returns the shard's store, for reads.
func (r *Replica) Store() *store.Store { return r.st }

// Term returns the replica's current Raft term.
func (r *Replica) Term() uint64 { return r.raft.CurrentTerm() }

// LeaderCh returns raft's leadership notifications for this replica
// (true: it became the leader; false: it lost leadership). One goroutine
// must read it, always: raft blocks when it is full.
func (r *Replica) LeaderCh() <-chan bool { return r.notify }

// IsLeader reports whether this replica is the shard's Raft leader.
func (r *Replica) IsLeader() bool { return r.raft.State() == raft.Leader }

// Leader returns the Raft server id (see NodeOf) and address of the
// shard's leader as this replica knows it ("" while unknown).
func (r *Replica) Leader() (id, addr string) {
	a, i := r.raft.LeaderWithID()
	return string(i), string(a)
}

// Halted returns the error the replica halted with, nil while it runs.
func (r *Replica) Halted() error { return r.fsm.haltErr() }

// Barrier waits until every entry committed before it is applied (a new
// leader calls it before serving).
func (r *Replica) Barrier(ctx context.Context) error {
	return raftErr(r, r.wait(ctx, r.raft.Barrier(r.tune.ApplyTimeout)), false)
}

// Apply commits b through the shard's Raft log (namespace.Replica). The
// directories whose entries b changes get this node's clock as their
// modification and change times (store.Batch.StampDirTimes), once the
// shard writes batch format 3, and keep their link counts
// (store.Batch.CountLinks), once it writes format 6.
func (r *Replica) Apply(ctx context.Context, b *store.Batch) error {
	max := r.LogFormat()
	if max >= store.BatchFormatV3 {
		b.StampDirTimes(time.Now().UnixNano())
	}
	if max >= store.BatchFormatV6 {
		b.CountLinks()
	}
	data, err := encodeBatch(b, max)
	if err != nil {
		return err
	}
	return r.apply(ctx, data)
}

// LogFormat returns the newest batch format this replica writes now.
func (r *Replica) LogFormat() byte {
	v := r.maxBatch
	if r.logFormat != nil {
		v = min(v, r.logFormat())
	}
	return max(v, store.BatchFormatV1)
}

// Rekey moves every path under oldPrefix to newPrefix, whose ancestor
// codes are chain, on every replica (namespace.Replica).
func (r *Replica) Rekey(ctx context.Context, oldPrefix, newPrefix string, chain []store.AncestorCode) error {
	return r.apply(ctx, encodeRekey(oldPrefix, newPrefix, chain))
}

// Recode sets root's ancestor code (nil: none) in every inode under root
// on every replica (namespace.Replica).
func (r *Replica) Recode(ctx context.Context, root string, code *store.AncestorCode) error {
	return r.apply(ctx, encodeRecode(root, code))
}

// apply commits one command and returns its result.
//
// A halted replica's result for an entry is not the entry's result: the
// entry is committed, and the other replicas apply it. So a halted replica
// appends nothing more, and the entries it halted on or after have an
// unknown outcome.
func (r *Replica) apply(ctx context.Context, data []byte) error {
	if err := r.Halted(); err != nil {
		return fmt.Errorf("shard %s: %w: %w", r.id, rpc.ErrUnavailable, err)
	}
	f := r.raft.Apply(data, r.tune.ApplyTimeout)
	if err := r.wait(ctx, f); err != nil {
		return raftErr(r, err, true)
	}
	if err, ok := f.Response().(error); ok && err != nil {
		if errors.Is(err, ErrHalted) {
			return fmt.Errorf("shard %s: %w: %w: %w", r.id, rpc.ErrUnavailable, rpc.ErrOutcomeUnknown, err)
		}
		return err
	}
	return nil
}

// VerifyLeader returns nil if this replica leads its shard at a moment
// after the call began; concurrent calls share one round of heartbeats.
func (r *Replica) VerifyLeader(ctx context.Context) error { return r.verify.check(ctx) }

// TestKey tests k against the shard's counting filter.
func (r *Replica) TestKey(k routing.Key) bool {
	r.fsm.filterMu.RLock()
	defer r.fsm.filterMu.RUnlock()
	return r.fsm.filter.TestKey(k)
}

// Filter runs fn with the shard's counting filter locked.
func (r *Replica) Filter(fn func(f *routing.CountingFilter)) {
	r.fsm.filterMu.Lock()
	defer r.fsm.filterMu.Unlock()
	fn(r.fsm.filter)
}

// Server is one member of the shard's Raft configuration.
type Server struct {
	ID, Addr string
	Voter    bool
}

// Configuration returns the shard's Raft configuration as this replica
// knows it.
func (r *Replica) Configuration(ctx context.Context) ([]Server, error) {
	f := r.raft.GetConfiguration()
	if err := r.wait(ctx, f); err != nil {
		return nil, raftErr(r, err, false)
	}
	var out []Server
	for _, s := range f.Configuration().Servers {
		out = append(out, Server{ID: string(s.ID), Addr: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	return out, nil
}

// AddNonvoter adds node id at addr as a non-voter (it receives the log and
// catches up without counting for the quorum) — leader only.
func (r *Replica) AddNonvoter(ctx context.Context, id, addr string) error {
	return raftErr(r, r.wait(ctx, r.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, r.tune.ApplyTimeout)), false)
}

// AddVoter adds node id at addr as a voter (or promotes it) — leader only.
func (r *Replica) AddVoter(ctx context.Context, id, addr string) error {
	return raftErr(r, r.wait(ctx, r.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, r.tune.ApplyTimeout)), false)
}

// RemoveServer removes node id from the shard — leader only.
func (r *Replica) RemoveServer(ctx context.Context, id string) error {
	return raftErr(r, r.wait(ctx, r.raft.RemoveServer(raft.ServerID(id), 0, r.tune.ApplyTimeout)), false)
}

// TransferLeadership hands leadership to node id at addr — leader only.
func (r *Replica) TransferLeadership(ctx context.Context, id, addr string) error {
	done := r.verify.revoke()
	defer done()
	return raftErr(r, r.wait(ctx, r.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(addr))), false)
}

// Indexes are a replica's Raft indexes.
type Indexes struct {
	// Applied is the index of the last entry the store holds (a command;
	// Raft's own entries, such as a new leader's no-op, do not reach the
	// store); RaftApplied the last entry Raft applied, of any kind; Commit
	// and Last raft's commit and last log indexes.
	Applied, RaftApplied, Commit, Last uint64
}

// Indexes returns the replica's indexes.
func (r *Replica) Indexes() Indexes {
	applied, _ := r.st.AppliedIndex(r.ctx)
	return Indexes{Applied: applied, RaftApplied: r.raft.AppliedIndex(), Commit: r.raft.CommitIndex(), Last: r.raft.LastIndex()}
}

// Stats returns raft's statistics of the replica (for status pages).
func (r *Replica) Stats() map[string]string { return r.raft.Stats() }

// LastContact returns when this replica last heard from its leader (zero
// for the leader itself).
func (r *Replica) LastContact() time.Time { return r.raft.LastContact() }

// ParseTerm reads raft's "term" statistic.
func ParseTerm(stats map[string]string) uint64 {
	t, _ := strconv.ParseUint(stats["term"], 10, 64)
	return t
}

// wait waits for a raft future, for ctx, or for the replica to close:
// raft's own timeouts only bound enqueueing, a lost quorum can leave a
// future pending, and raft, when it shuts down, drops unanswered the
// committed entries its state machine had not taken yet (runFSM returns
// with them queued). The goroutine waiting for such a future stays.
func (r *Replica) wait(ctx context.Context, f raft.Future) error {
	return waitFuture(ctx, r.ctx.Done(), f)
}

// waitFuture waits for f, for ctx or for closed (nil: never closed).
func waitFuture(ctx context.Context, closed <-chan struct{}, f raft.Future) error {
	ch := make(chan error, 1)
	go func() { ch <- f.Error() }() // ends when raft resolves f
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-closed:
		return raft.ErrRaftShutdown
	}
}

// raftErr maps raft's errors to the namespace's: not the leader (with the
// leader this replica knows; also leadership lost by a call that appended
// no command), and, for a command (appended true) whose fate raft had not
// decided, an unknown outcome.
func raftErr(r *Replica, err error, appended bool) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress),
		errors.Is(err, raft.ErrEnqueueTimeout),
		!appended && errors.Is(err, raft.ErrLeadershipLost):
		// (A leadership check or a barrier that lost leadership changed
		// nothing: the caller may go to the next leader, as after a
		// planned move; docs/design.md, "Planned leadership moves".)
		id, _ := r.Leader()
		return fmt.Errorf("shard %s: %w: %w", r.id, &rpc.NotLeaderError{Shard: r.id, Leader: NodeOf(id)}, err)
	case appended && (errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrRaftShutdown) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		return fmt.Errorf("shard %s: %w: %w: %w", r.id, rpc.ErrUnavailable, rpc.ErrOutcomeUnknown, err)
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, raft.ErrAbortedByRestore):
		return fmt.Errorf("shard %s: %w: %w", r.id, rpc.ErrUnavailable, err)
	}
	return fmt.Errorf("shard %s: %w", r.id, err)
}
