package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/ghba/ghba/fsm"
	"github.com/ghba/ghba/node/console"
	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/rpc"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/serf/serf"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// nodeMetrics are the node's Prometheus metrics, in a registry of its own (no
// global state: several nodes may share a process, as in tests). Counters
// of events are updated where they happen; everything else is read from
// the node's parts at scrape time by nodeCollector.
type nodeMetrics struct {
	reg        *prometheus.Registry
	serfEvents *prometheus.CounterVec
	fsmChanges prometheus.Counter
	fsmRefused prometheus.Counter
	fsmSkipped prometheus.Counter

	shardReplicaAdds    prometheus.Counter
	shardReplicaRemoves prometheus.Counter
	shardTransfers      prometheus.Counter
	leaderChanges       prometheus.Counter
	reconciles          prometheus.Counter
	joins               prometheus.Counter
	leaves              prometheus.Counter
	splits              prometheus.Counter
	merges              prometheus.Counter
	switches            prometheus.Counter
}

func newNodeMetrics(n *Node) *nodeMetrics {
	m := &nodeMetrics{
		reg: prometheus.NewRegistry(),
		serfEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ghba_serf_events_total", Help: "Serf member events received, by type.",
		}, []string{"event"}),
		fsmChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ghba_fsm_changes_total", Help: "Group FSM commands applied here that changed the state (and restores).",
		}),
		fsmRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ghba_fsm_commands_refused_total", Help: "FSM commands this node proposed as leader that the FSM refused.",
		}),
		fsmSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ghba_fsm_entries_skipped_total", Help: "Group log entries of an unknown, ignorable command (written by a newer build) this node skipped.",
		}),
		shardReplicaAdds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ghba_shard_replicas_added_total", Help: "Shard replicas this node added to shards it led (placement, repair).",
		}),
		shardReplicaRemoves: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ghba_shard_replicas_removed_total", Help: "Shard replicas this node removed from shards it led (placement, repair, leave).",
		}),
		shardTransfers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ghba_shard_leadership_transfers_total", Help: "Shard leaderships this node handed to the shard's owner or another replica.",
		}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ghba_raft_leadership_acquired_total", Help: "Times this node became its group's Raft leader.",
		}),
		reconciles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ghba_reconcile_runs_total", Help: "Runs of the leader's Serf/FSM reconcile loop on this node.",
		}),
		joins: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ghba_group_joins_total", Help: "Times this node joined a group.",
		}),
		leaves: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ghba_leaves_total", Help: "Graceful leaves started on this node.",
		}),
		splits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ghba_group_splits_total", Help: "Group splits this node carried out as its group's leader.",
		}),
		merges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ghba_group_merges_total", Help: "Merges of its group into another this node started as its group's leader.",
		}),
		switches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ghba_group_switches_total", Help: "Times this node moved to another group (split or merge).",
		}),
	}
	m.reg.MustRegister(
		m.serfEvents, m.fsmChanges, m.fsmRefused, m.fsmSkipped, m.leaderChanges,
		m.shardReplicaAdds, m.shardReplicaRemoves, m.shardTransfers, m.reconciles, m.joins, m.leaves,
		m.splits, m.merges, m.switches,
		newNodeCollector(n),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// nodeCollector reads the node's state at scrape time.
type nodeCollector struct {
	n *Node

	info, files, filterBytes, replicas, lookups, hops          *prometheus.Desc
	raftLeader, raftState, raftTerm, raftCommit, raftApplied   *prometheus.Desc
	raftLastContact, groupMembers, groupOrigins, migrated      *prometheus.Desc
	serfMembers, storeCommits, storeSyncs, storeCommitFailures *prometheus.Desc

	lookupOutcomes, broadcasts, multicasts, txns, prepared, rekeyed                *prometheus.Desc
	shardsLed, shardsHosted, shardLeaderships, repairs, replicaLag, replicaApplied *prometheus.Desc
	filterPushes, filterPulls, filterMismatches, filterBytesSent                   *prometheus.Desc
	arrayMembers, lruLen, serving, settled                                         *prometheus.Desc
	rpcServed                                                                      *prometheus.Desc
	dataDeleted, trashPending, leases                                              *prometheus.Desc
}

func newNodeCollector(n *Node) *nodeCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &nodeCollector{
		n:                   n,
		info:                d("ghba_node_info", "Constant 1, labelled with the node's id, group and version.", "node_id", "group", "version"),
		files:               d("ghba_inodes", "Paths of the shards this node leads, by type.", "type"),
		filterBytes:         d("ghba_filter_bytes", "Memory used by all filters on this node."),
		replicas:            d("ghba_replicas_held", "Segment-filter replicas held by this node."),
		lookups:             d("ghba_lookups_total", "Lookups entered at this node, by the level that resolved them.", "level"),
		hops:                d("ghba_lookup_hops_total", "Total RPC hops of the lookups entered at this node."),
		raftLeader:          d("ghba_raft_leader", "1 if this node leads its group's Raft."),
		raftState:           d("ghba_raft_state", "1 for this node's current Raft state.", "state"),
		raftTerm:            d("ghba_raft_term", "Current Raft term."),
		raftCommit:          d("ghba_raft_commit_index", "Raft commit index."),
		raftApplied:         d("ghba_raft_applied_index", "Raft index last applied to the FSM."),
		raftLastContact:     d("ghba_raft_last_contact_seconds", "Seconds since a follower last heard from its leader (0 on the leader)."),
		groupMembers:        d("ghba_group_members", "Members of this node's group in its FSM, by status.", "status"),
		groupOrigins:        d("ghba_group_origins", "Nodes outside the group whose replicas the group holds."),
		migrated:            d("ghba_replicas_migrated_total", "Replicas moved between members of this node's group since it began."),
		serfMembers:         d("ghba_serf_members", "Serf members as this node sees them, by status.", "status"),
		storeCommits:        d("ghba_store_commits_total", "Write requests taken by the store's group committer."),
		storeSyncs:          d("ghba_store_syncs_total", "Badger transactions (syncs) committed by the store."),
		storeCommitFailures: d("ghba_store_commit_failures_total", "Write requests the store answered with an error."),
		lookupOutcomes:      d("ghba_lookup_failures_total", "Lookups entered here that answered not found or unavailable.", "result"),
		broadcasts:          d("ghba_l4_broadcasts_total", "L4 broadcasts to every node started here."),
		multicasts:          d("ghba_l3_multicasts_total", "L3 multicasts to this node's group started here."),
		txns:                d("ghba_txns_total", "Coordinated transactions (create, unlink, rename across homes) by outcome.", "result"),
		prepared:            d("ghba_txn_parts_prepared", "Prepared transaction parts held here."),
		rekeyed:             d("ghba_rekeyed_total", "Inodes re-keyed here by directory renames."),
		shardsLed:           d("ghba_shards_led", "Shards this node leads."),
		shardsHosted:        d("ghba_shards_hosted", "Shard replicas this node hosts."),
		shardLeaderships:    d("ghba_shard_leaderships_total", "Times this node started serving a shard as its leader (starts, fail-overs, transfers)."),
		repairs:             d("ghba_replica_repairs_total", "Members whose shard replicas this node, as its group's leader, placed elsewhere after replica_repair_after."),
		replicaLag:          d("ghba_shard_replica_lag", "Log entries a hosted replica's store is behind its commit index.", "shard"),
		replicaApplied:      d("ghba_shard_applied_index", "Last log entry a hosted replica's store holds.", "shard"),
		filterPushes:        d("ghba_filter_pushes_total", "Filter update pushes, by direction and result.", "kind"),
		filterPulls:         d("ghba_filter_pulls_total", "Full filter pulls, sent and served.", "kind"),
		filterMismatches:    d("ghba_filter_version_mismatches_total", "Filter deltas refused for a version mismatch."),
		filterBytesSent:     d("ghba_filter_bytes_sent_total", "Filter bytes sent in pushes and pulls."),
		arrayMembers:        d("ghba_filter_array_members", "Filters held in the L1 (LRU) and L2 (segment and memory budget) arrays.", "array"),
		lruLen:              d("ghba_lru_entries", "Paths in this node's LRU list."),
		serving:             d("ghba_serving", "1 while the node serves every request it accepts (status alive), 0 while starting or leaving."),
		rpcServed:           d("ghba_rpc_calls_served_total", "RPC calls this node answered (from clients and other nodes), with a result or an error, by method.", "method"),
		settled:             d("ghba_groups_settled", "1 while the node sees its groups settled (no split, merge or switch pending, its filter replicas loaded), else 0."),
		dataDeleted:         d("ghba_data_objects_deleted_total", "Objects of the data store (file contents no layout references any more) that the garbage collection of the shards this node led deleted."),
		leases:              d("ghba_cache_leases_total", "Leases of the client metadata cache: granted on inodes (granted) and on absences (granted_absent); revocations a holder acknowledged (notified) and those that waited for the lease's end (expired).", "event"),
		trashPending:        d("ghba_data_trash_pending", "Objects the trash of the shards this node leads holds: in their grace period (data_gc_grace), or waiting for a data store."),
	}
}

// Describe implements prometheus.Collector.
func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.info, c.files, c.filterBytes, c.replicas, c.lookups, c.hops,
		c.raftLeader, c.raftState, c.raftTerm, c.raftCommit, c.raftApplied,
		c.raftLastContact, c.groupMembers, c.groupOrigins, c.migrated,
		c.serfMembers, c.storeCommits, c.storeSyncs, c.storeCommitFailures,
		c.lookupOutcomes, c.broadcasts, c.multicasts, c.txns, c.prepared, c.rekeyed,
		c.shardsLed, c.shardsHosted, c.shardLeaderships, c.repairs, c.replicaLag, c.replicaApplied,
		c.filterPushes, c.filterPulls, c.filterMismatches, c.filterBytesSent,
		c.arrayMembers, c.lruLen, c.serving, c.settled, c.rpcServed,
		c.dataDeleted, c.trashPending, c.leases,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the node's own state, then
// what its shards, RPC server, store, namespace, Raft, group FSM and Serf
// report, each part only when the node has it.
func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	out := metricSink(ch)
	out.gauge(c.info, 1, n.cfg.NodeID, n.group(), buildVersion())
	settled, _ := n.settled()
	out.gauge(c.settled, oneIf(settled))
	serving, _ := n.serving()
	out.gauge(c.serving, oneIf(serving && !n.leaving.Load()))
	if n.shards != nil {
		c.collectShards(out)
	}
	if n.rpcSrv != nil {
		for method, v := range n.rpcSrv.ServedByMethod() {
			out.counter(c.rpcServed, float64(v), method)
		}
	}
	if n.store != nil {
		s := n.store.Stats()
		out.counter(c.storeCommits, float64(s.Requests))
		out.counter(c.storeSyncs, float64(s.Txns))
		out.counter(c.storeCommitFailures, float64(s.Failed))
	}
	if n.ns != nil {
		c.collectNamespace(out, n.ns.Stats())
	}
	if r := n.raftNode(); r != nil {
		c.collectRaft(out, r)
	}
	if f := n.groupFSM(); f != nil {
		c.collectGroup(out, f)
	}
	if s := n.serfAgent(); s != nil {
		c.collectSerf(out, s)
	}
}

// metricSink is where Collect sends a scrape's metrics.
type metricSink chan<- prometheus.Metric

// gauge sends d's gauge value v.
func (ch metricSink) gauge(d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

// counter sends d's counter value v.
func (ch metricSink) counter(d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

// oneIf is 1 when b holds, else 0 (a gauge of a condition).
func oneIf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collectShards sends the metrics of the shard replicas the node hosts.
func (c *nodeCollector) collectShards(out metricSink) {
	n := c.n
	reps := n.shards.replicaStatus(context.Background())
	led := 0
	for _, r := range reps {
		if r.Leading {
			led++
		}
		out.gauge(c.replicaLag, float64(r.Lag), r.Shard)
		out.gauge(c.replicaApplied, float64(r.AppliedIndex), r.Shard)
	}
	out.gauge(c.shardsLed, float64(led))
	out.gauge(c.shardsHosted, float64(len(reps)))
	out.counter(c.shardLeaderships, float64(n.shardLeaderships.Load()))
	out.counter(c.repairs, float64(n.repairs.Load()))
}

// collectNamespace sends the metrics of the namespace's statistics s.
func (c *nodeCollector) collectNamespace(out metricSink, s namespace.Stats) {
	const gauge, counter = prometheus.GaugeValue, prometheus.CounterValue
	for _, m := range []struct {
		desc  *prometheus.Desc
		kind  prometheus.ValueType
		value float64
		label string // the value of desc's label, if it has one
	}{
		{c.files, gauge, float64(s.Files), "file"},
		{c.files, gauge, float64(s.Dirs), "dir"},
		{c.filterBytes, gauge, float64(s.FilterBytes), ""},
		{c.lookups, counter, float64(s.Levels.L1), rpc.LevelL1},
		{c.lookups, counter, float64(s.Levels.L2), rpc.LevelL2},
		{c.lookups, counter, float64(s.Levels.L3), rpc.LevelL3},
		{c.lookups, counter, float64(s.Levels.L4), rpc.LevelL4},
		{c.hops, counter, float64(s.Hops), ""},
		{c.lookupOutcomes, counter, float64(s.NotFound), "not_found"},
		{c.lookupOutcomes, counter, float64(s.Unavailable), "unavailable"},
		{c.broadcasts, counter, float64(s.Broadcasts), ""},
		{c.multicasts, counter, float64(s.Multicasts), ""},
		{c.txns, counter, float64(s.TxnsCommitted), "committed"},
		{c.txns, counter, float64(s.TxnsAborted), "aborted"},
		{c.txns, counter, float64(s.TxnsBusy), "busy"},
		{c.prepared, gauge, float64(s.Prepared), ""},
		{c.rekeyed, counter, float64(s.Rekeyed), ""},
		{c.filterPushes, counter, float64(s.PushesSent), "sent"},
		{c.filterPushes, counter, float64(s.PushFailures), "failed"},
		{c.filterPushes, counter, float64(s.PushesReceived), "received"},
		{c.filterPulls, counter, float64(s.PullsSent), "sent"},
		{c.filterPulls, counter, float64(s.PullsServed), "served"},
		{c.filterMismatches, counter, float64(s.VersionMismatches), ""},
		{c.filterBytesSent, counter, float64(s.FilterBytesSent), ""},
		{c.arrayMembers, gauge, float64(s.L1Members), "l1"},
		{c.arrayMembers, gauge, float64(s.L2Members), "l2"},
		{c.lruLen, gauge, float64(s.LRULen), ""},
		{c.dataDeleted, counter, float64(s.DataObjectsDeleted), ""},
		{c.trashPending, gauge, float64(s.TrashPending), ""},
		{c.leases, counter, float64(s.LeasesGranted), "granted"},
		{c.leases, counter, float64(s.LeasesGrantedAbsent), "granted_absent"},
		{c.leases, counter, float64(s.LeasesNotified), "notified"},
		{c.leases, counter, float64(s.LeasesExpired), "expired"},
	} {
		var labels []string
		if m.label != "" {
			labels = []string{m.label}
		}
		out <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value, labels...)
	}
}

// collectRaft sends the metrics of the group's Raft as r, this node's
// member of it, sees it.
func (c *nodeCollector) collectRaft(out metricSink, r *raft.Raft) {
	st := r.State()
	out.gauge(c.raftLeader, oneIf(st == raft.Leader))
	for _, s := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		out.gauge(c.raftState, oneIf(s == st), s.String())
	}
	out.gauge(c.raftTerm, float64(r.CurrentTerm()))
	out.gauge(c.raftCommit, float64(r.CommitIndex()))
	out.gauge(c.raftApplied, float64(r.AppliedIndex()))
	lc := 0.0
	if st != raft.Leader {
		if t := r.LastContact(); !t.IsZero() {
			lc = time.Since(t).Seconds()
		}
	}
	out.gauge(c.raftLastContact, lc)
}

// collectGroup sends the metrics of the node's group as its FSM f holds it.
func (c *nodeCollector) collectGroup(out metricSink, f *fsm.FSM) {
	n := c.n
	by := map[fsm.Status]int{fsm.StatusActive: 0, fsm.StatusLeaving: 0, fsm.StatusFailed: 0}
	for _, m := range f.Members() {
		by[m.Status]++
	}
	for st, k := range by {
		out.gauge(c.groupMembers, float64(k), string(st))
	}
	out.gauge(c.groupOrigins, float64(len(f.Origins())))
	out.counter(c.migrated, float64(f.ReplicasMigrated()))
	if n.isJoined() {
		out.gauge(c.replicas, float64(f.Load(n.cfg.NodeID)))
	} else {
		out.gauge(c.replicas, 0)
	}
}

// collectSerf sends the numbers of ghba's Serf members, by status, as s
// sees them.
func (c *nodeCollector) collectSerf(out metricSink, s *serf.Serf) {
	by := map[string]int{statusAlive: 0, statusFailed: 0, statusLeaving: 0, statusLeft: 0}
	for _, m := range s.Members() {
		if m.Tags[tagRole] == roleGHBA && m.Status != serf.StatusNone {
			by[serfStatus(m.Status)]++
		}
	}
	for st, k := range by {
		out.gauge(c.serfMembers, float64(k), st)
	}
}

// StatusJSON is the body of /v1/status: the node's status (the fields of
// rpc.StatusResponse) plus its view of the cluster, all local (no calls to
// other nodes).
type StatusJSON struct {
	rpc.StatusResponse
	// Joined reports whether the node is a member of its group.
	Joined bool `json:"joined"`
	// Leaving reports a graceful leave in progress.
	Leaving bool `json:"leaving"`
	// RootHome is the id of the node homing "/".
	RootHome string `json:"root_home"`
	// Raft has the group's Raft indexes as this node sees them.
	Raft RaftStatus `json:"raft"`
	// GroupMembers are the members of this node's group in its FSM.
	GroupMembers []fsm.Member `json:"group_members"`
	// Peers is the Directory: every node this one knows of.
	Peers []PeerJSON `json:"peers"`
}

// RaftStatus is the Raft part of StatusJSON.
type RaftStatus struct {
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	LastIndex    uint64 `json:"last_index"`
	Voters       int    `json:"voters"`
}

// PeerJSON is a Peer in StatusJSON.
type PeerJSON struct {
	ID       string `json:"id"`
	Group    string `json:"group"`
	RPCAddr  string `json:"rpc_addr"`
	HTTPAddr string `json:"http_addr"`
	Up       bool   `json:"up"`
	Leaving  bool   `json:"leaving"`
}

// StatusJSON returns the body of /v1/status.
func (n *Node) StatusJSON(ctx context.Context) *StatusJSON {
	s := &StatusJSON{
		StatusResponse: *n.Status(),
		Joined:         n.isJoined(),
		Leaving:        n.leaving.Load(),
		RootHome:       n.dir.RootShard(),
		GroupMembers:   []fsm.Member{},
		Peers:          []PeerJSON{},
	}
	if r := n.raftNode(); r != nil {
		s.Raft = RaftStatus{Term: r.CurrentTerm(), CommitIndex: r.CommitIndex(), AppliedIndex: r.AppliedIndex(), LastIndex: r.LastIndex()}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		if servers, err := n.raftServers(cctx); err == nil {
			for _, sv := range servers {
				if sv.Suffrage == raft.Voter {
					s.Raft.Voters++
				}
			}
		}
		cancel()
	}
	if f := n.groupFSM(); f != nil && s.Joined {
		s.GroupMembers = f.Members()
	}
	for _, p := range n.dir.Peers() {
		s.Peers = append(s.Peers, PeerJSON(p))
	}
	return s
}

// healthJSON is the body of /v1/health and /v1/health/live.
type healthJSON struct {
	// Status is "serving", "starting" or "leaving" (/v1/health), or
	// "live" (/v1/health/live).
	Status string `json:"status"`
	NodeID string `json:"node_id"`
	// Reason says why the node does not serve.
	Reason string `json:"reason,omitempty"`
}

// serveHealth is the readiness endpoint: 200 while the node serves every
// request it accepts, 503 with the reason otherwise.
func (n *Node) serveHealth(w http.ResponseWriter, _ *http.Request) {
	ok, reason := n.serving()
	switch {
	case n.leaving.Load():
		writeHealth(w, http.StatusServiceUnavailable, healthJSON{Status: statusLeaving, NodeID: n.cfg.NodeID, Reason: "the node is leaving the cluster"})
	case ok:
		writeHealth(w, http.StatusOK, healthJSON{Status: "serving", NodeID: n.cfg.NodeID})
	default:
		writeHealth(w, http.StatusServiceUnavailable, healthJSON{Status: statusStarting, NodeID: n.cfg.NodeID, Reason: reason})
	}
}

func writeHealth(w http.ResponseWriter, code int, h healthJSON) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(h)
}

// newHTTPServer returns the HTTP server of /metrics, /v1/status,
// /v1/health (readiness), /v1/health/live (liveness), with enable_debug
// /debug/pprof/, and at every other path the web console (package
// console).
func (n *Node) newHTTPServer() *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{
		ErrorLog: newStdLogger(n.log, "metrics"),
	}))
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(n.StatusJSON(r.Context())); err != nil {
			n.log.Debug("writing /v1/status", "err", err)
		}
	})
	mux.HandleFunc("GET /v1/health", n.serveHealth)
	mux.HandleFunc("GET /v1/health/live", func(w http.ResponseWriter, r *http.Request) {
		writeHealth(w, http.StatusOK, healthJSON{Status: "live", NodeID: n.cfg.NodeID})
	})
	if n.cfg.EnableDebug {
		mux.Handle("/debug/pprof/", n.debugHandler())
	}
	mux.Handle("/", n.console.Handler())
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          newStdLogger(n.log, "http"),
		BaseContext:       func(net.Listener) context.Context { return n.bgCtx },
	}
}

// consoleNode is what the web console reads of the node.
type consoleNode struct{ n *Node }

// Counters implements console.Node: the RPC calls served and the lookups
// resolved per level.
func (c consoleNode) Counters() console.Counters {
	var out console.Counters
	if c.n.rpcSrv != nil {
		out.Ops = c.n.rpcSrv.Served()
	}
	if c.n.ns != nil {
		l := c.n.ns.LevelCounts()
		out.Levels = [4]uint64{l.L1, l.L2, l.L3, l.L4}
	}
	return out
}

// newConsole returns the web console of the node: it calls the node's
// own RPC port as the logged-in user (with the node's TLS dialer) and
// marks its cookie Secure when the HTTP port serves TLS.
func (n *Node) newConsole() (*console.Server, error) {
	c, err := console.New(consoleNode{n}, console.Options{
		NodeID:         n.cfg.NodeID,
		RPCAddr:        n.rpcAddrForSelf(),
		Dial:           n.dialer(),
		ACLEnabled:     n.cfg.ACL.Enabled,
		Secure:         n.tls != nil,
		SampleInterval: n.cfg.Console.SampleInterval,
		History:        n.cfg.Console.History,
		SessionIdle:    n.cfg.Console.SessionIdle,
		CallTimeout:    n.tune.StatusTimeout + n.tune.RPCTimeout,
		Logger:         n.log.With("component", "console"),
	})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return c, nil
}

// rpcAddrForSelf is the address the node's own clients reach its RPC port
// at: the bound one (bind_addr may be 0.0.0.0, which is not an address to
// dial, then the advertised one).
func (n *Node) rpcAddrForSelf() string {
	if ip := net.ParseIP(n.cfg.BindAddr); ip != nil && !ip.IsUnspecified() {
		return net.JoinHostPort(n.cfg.BindAddr, strconv.Itoa(n.cfg.Ports.RPC))
	}
	return n.addr(n.cfg.Ports.RPC)
}
