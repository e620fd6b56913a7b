package node

import (
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/ghba/ghba/fsm"
	"github.com/ghba/ghba/rpc"
	"github.com/hashicorp/serf/serf"
)

// registerAdmin registers the Cluster.* methods on the RPC server.
func (n *Node) registerAdmin() {
	s := n.rpcSrv
	rpc.Register(s, rpc.MethodMembers, func(ctx context.Context, _ *rpc.MembersRequest) (*rpc.MembersResponse, error) {
		return &rpc.MembersResponse{Members: n.Members(ctx)}, nil
	})
	rpc.Register(s, rpc.MethodGroups, func(ctx context.Context, _ *rpc.GroupsRequest) (*rpc.GroupsResponse, error) {
		return n.Groups(ctx), nil
	})
	rpc.Register(s, rpc.MethodStatus, func(ctx context.Context, _ *rpc.StatusRequest) (*rpc.StatusResponse, error) {
		return n.Status(), nil
	})
	rpc.Register(s, rpc.MethodShards, func(ctx context.Context, _ *rpc.ShardsRequest) (*rpc.ShardsResponse, error) {
		return &rpc.ShardsResponse{Shards: n.Shards(ctx)}, nil
	})
	rpc.Register(s, rpc.MethodPing, func(ctx context.Context, _ *rpc.PingRequest) (*rpc.PingResponse, error) {
		return &rpc.PingResponse{NodeID: n.cfg.NodeID}, nil
	})
	rpc.Register(s, rpc.MethodJoin, func(ctx context.Context, req *rpc.JoinRequest) (*rpc.JoinResponse, error) {
		if len(req.Addrs) == 0 {
			return nil, fmt.Errorf("%w: join: no addresses", fs.ErrInvalid)
		}
		for _, a := range req.Addrs {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil, fmt.Errorf("%w: join: %q is not host:port", fs.ErrInvalid, a)
			}
		}
		k, err := n.Join(ctx, req.Addrs)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", rpc.ErrUnavailable, err)
		}
		return &rpc.JoinResponse{Joined: k}, nil
	})
	rpc.Register(s, rpc.MethodLeave, func(ctx context.Context, req *rpc.LeaveRequest) (*rpc.LeaveResponse, error) {
		if req.NodeID != "" && req.NodeID != n.cfg.NodeID {
			return nil, fmt.Errorf("%w: this is node %q, not %q", fs.ErrInvalid, n.cfg.NodeID, req.NodeID)
		}
		return n.Leave(ctx)
	})
	rpc.Register(s, rpc.MethodKeyring, func(ctx context.Context, req *rpc.KeyringRequest) (*rpc.KeyringResponse, error) {
		return n.Keyring(ctx, req.Op, req.Key)
	})
	rpc.Register(s, methodGroupJoin, n.handleGroupJoin)
	rpc.Register(s, methodGroupLeave, n.handleGroupLeave)
	rpc.Register(s, methodGroupSwitch, n.handleGroupSwitch)
	rpc.Register(s, methodShardReconcile, n.handleShardReconcile)
	rpc.Register(s, methodShardState, n.handleShardState)
}

// Members returns every node Serf knows (left ones until Serf forgets
// them) and group members only the FSM knows, sorted by id. Raft role,
// files and replicas come from each alive node's status, fetched
// concurrently with a short timeout (left empty for nodes that do not
// answer).
func (n *Node) Members(ctx context.Context) []rpc.Member { return n.members(ctx, nil) }

// members is Members; with into set, it also returns the status of every
// node that answered.
func (n *Node) members(ctx context.Context, into *map[string]*rpc.StatusResponse) []rpc.Member {
	byID := map[string]*rpc.Member{}
	self := n.Status()
	byID[n.cfg.NodeID] = &rpc.Member{
		ID: n.cfg.NodeID, Group: self.Group, Status: self.Status,
		RPCAddr: n.addr(n.cfg.Ports.RPC), RaftAddr: n.addr(n.cfg.Ports.Raft),
		SerfAddr: n.addr(n.cfg.Ports.Serf), HTTPAddr: n.addr(n.cfg.Ports.HTTP),
		RaftRole: self.RaftRole, Files: self.Files, ReplicasHeld: self.ReplicasHeld,
	}
	byID[n.cfg.NodeID].ShardsLed, byID[n.cfg.NodeID].ShardsHosted = shardLists(self.Replicas)
	selfTags := map[string]string{}
	n.versionTags(selfTags)
	memberVersions(byID[n.cfg.NodeID], selfTags)
	statuses := map[string]*rpc.StatusResponse{n.cfg.NodeID: self}
	var statusMu sync.Mutex
	if s := n.serfAgent(); s != nil {
		for _, m := range s.Members() {
			if m.Tags[tagRole] != roleGHBA || m.Name == n.cfg.NodeID {
				continue
			}
			st := serfStatus(m.Status)
			switch {
			case m.Tags[tagLeaving] == "1" && m.Status == serf.StatusAlive:
				st = statusLeaving
			case m.Tags[tagStopping] == "1" && m.Status == serf.StatusAlive:
				st = statusStopping
			case m.Tags[tagServing] != "1" && m.Status == serf.StatusAlive:
				st = statusStarting
			}
			g := m.Tags[tagGroup]
			if f := n.groupFSM(); g == "" && f != nil && n.isJoined() {
				if _, ok := f.Member(m.Name); ok {
					g = n.group() // joined; its new tags have not reached us yet
				}
			}
			byID[m.Name] = &rpc.Member{
				ID: m.Name, Group: g, Status: st,
				RPCAddr: m.Tags[tagRPC], RaftAddr: m.Tags[tagRaft], HTTPAddr: m.Tags[tagHTTP],
				SerfAddr: net.JoinHostPort(m.Addr.String(), strconv.Itoa(int(m.Port))),
			}
			memberVersions(byID[m.Name], m.Tags)
		}
	}
	if f := n.groupFSM(); f != nil && n.isJoined() {
		for _, m := range f.Members() {
			if _, ok := byID[m.ID]; ok {
				continue
			}
			st := statusAlive
			if m.Status == fsm.StatusFailed {
				st = statusFailed
			}
			byID[m.ID] = &rpc.Member{
				ID: m.ID, Group: n.group(), Status: st, RPCAddr: m.RPCAddr,
				RaftAddr: m.RaftAddr, SerfAddr: m.SerfAddr, HTTPAddr: m.HTTPAddr,
			}
		}
	}

	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for id, m := range byID {
		if id == n.cfg.NodeID || m.RPCAddr == "" || (m.Status != statusAlive && m.Status != statusLeaving && m.Status != statusStarting) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, n.tune.StatusTimeout)
			defer cancel()
			var st rpc.StatusResponse
			if err := n.client.Call(cctx, m.RPCAddr, rpc.MethodStatus, &rpc.StatusRequest{}, &st); err != nil {
				n.log.Debug("member status", "member", id, "err", err)
				return
			}
			m.RaftRole, m.Files, m.ReplicasHeld = st.RaftRole, st.Files, st.ReplicasHeld
			m.ShardsLed, m.ShardsHosted = shardLists(st.Replicas)
			statusMu.Lock()
			statuses[id] = &st
			statusMu.Unlock()
		}()
	}
	wg.Wait()
	if into != nil {
		*into = statuses
	}

	out := make([]rpc.Member, 0, len(byID))
	for _, m := range byID {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b rpc.Member) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Groups returns the groups of the cluster, sorted by name, with each
// group's leader (as the members report their roles), the replicas each
// member holds and whether the group is settled; and whether the whole
// cluster is (see groupsSettled).
func (n *Node) Groups(ctx context.Context) *rpc.GroupsResponse {
	var statuses map[string]*rpc.StatusResponse
	members := n.members(ctx, &statuses)
	return n.groupsFrom(members, statuses)
}

// groupsFrom is Groups from the members and the statuses of those that
// answered (members).
func (n *Node) groupsFrom(members []rpc.Member, statuses map[string]*rpc.StatusResponse) *rpc.GroupsResponse {
	r := &rpc.GroupsResponse{Groups: n.groupsOf(members)}
	for i := range r.Groups {
		g := &r.Groups[i]
		if st := statuses[g.Leader]; st != nil && st.Group == g.Group {
			g.MaxGroupSize, g.Auto, g.SizeChoice = st.MaxGroupSize, st.GroupSizeAuto, st.GroupSize
		}
	}
	r.Settled, r.Unsettled = groupsSettled(r.Groups, members, statuses)
	return r
}

// groupsOf returns the groups members belong to, sorted by name.
func (n *Node) groupsOf(members []rpc.Member) []rpc.GroupInfo {
	byName := map[string]*rpc.GroupInfo{}
	for _, m := range members {
		if m.Group == "" || m.Status == statusLeft {
			continue
		}
		g := byName[m.Group]
		if g == nil {
			g = &rpc.GroupInfo{Group: m.Group, Replicas: map[string]int{}}
			byName[m.Group] = g
		}
		g.Members = append(g.Members, m.ID)
		g.Replicas[m.ID] = m.ReplicasHeld
		if m.RaftRole == "leader" {
			g.Leader = m.ID
		}
	}
	if g, f := byName[n.group()], n.groupFSM(); g != nil && f != nil {
		if l := n.leaderID(); l != "" {
			g.Leader = l
		}
		for _, id := range g.Members {
			if _, ok := f.Member(id); ok {
				g.Replicas[id] = f.Load(id)
			}
		}
	}
	out := make([]rpc.GroupInfo, 0, len(byName))
	for _, g := range byName {
		slices.Sort(g.Members)
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b rpc.GroupInfo) int { return strings.Compare(a.Group, b.Group) })
	return out
}

// shardLists returns the shards a node leads and hosts, from its replicas.
func shardLists(reps []rpc.ReplicaStatus) (led, hosted []string) {
	led, hosted = []string{}, []string{}
	for _, r := range reps {
		hosted = append(hosted, r.Shard)
		if r.Leading {
			led = append(led, r.Shard)
		}
	}
	return led, hosted
}

// Shards returns every shard of the cluster as the nodes that answer
// report their replicas, sorted by id: its leader, its Raft configuration
// (as the leader knows it), the paths it holds and its applied index (the
// leader's), and the largest lag of a replica behind the leader. A shard
// whose leader does not answer has no leader, and its replicas are the
// nodes that reported one.
func (n *Node) Shards(ctx context.Context) []rpc.ShardInfo {
	var statuses map[string]*rpc.StatusResponse
	members := n.members(ctx, &statuses)
	groupOf := map[string]string{}
	for _, m := range members {
		groupOf[m.ID] = m.Group
	}
	byID := map[string]*rpc.ShardInfo{}
	applied := map[string]map[string]uint64{} // shard → node → applied index
	for id, st := range statuses {
		for _, r := range st.Replicas {
			s := byID[r.Shard]
			if s == nil {
				s = &rpc.ShardInfo{Shard: r.Shard, Replicas: []string{}}
				byID[r.Shard] = s
			}
			if applied[r.Shard] == nil {
				applied[r.Shard] = map[string]uint64{}
			}
			applied[r.Shard][id] = r.AppliedIndex
			if r.Leading {
				s.Leader, s.Group, s.Files, s.AppliedIndex = id, groupOf[id], r.Files, r.AppliedIndex
				s.Owner = r.Owner
				s.Replicas = slices.Clone(r.Members)
				s.Learners = slices.Clone(r.Learners)
			} else if s.Leader == "" && !slices.Contains(s.Replicas, id) {
				s.Replicas = append(s.Replicas, id)
				s.Group = cmp.Or(s.Group, groupOf[id])
			}
		}
	}
	// The shards of this node's group that no replica reported (none is
	// open yet, or every node hosting one is down).
	if f := n.groupFSM(); f != nil && n.isJoined() {
		for _, sh := range f.Shards() {
			if byID[sh.ID] == nil {
				byID[sh.ID] = &rpc.ShardInfo{Shard: sh.ID, Group: n.group(), Owner: sh.Owner, Replicas: []string{}}
			}
		}
	}
	out := make([]rpc.ShardInfo, 0, len(byID))
	for id, s := range byID {
		if s.Leader != "" {
			for _, idx := range applied[id] {
				if s.AppliedIndex > idx {
					s.MaxLag = max(s.MaxLag, s.AppliedIndex-idx)
				}
			}
		}
		slices.Sort(s.Replicas)
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b rpc.ShardInfo) int { return strings.Compare(a.Shard, b.Shard) })
	return out
}
