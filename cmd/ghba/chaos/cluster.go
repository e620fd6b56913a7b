package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ghba/ghba/rpc/client"
)

// Ports every node uses inside its container (each has its own IP).
const (
	portRPC  = 7400
	portRaft = 7401
	portSerf = 7402
	portHTTP = 7403
)

// Node is one ghba agent in its container.
type Node struct {
	// ID is the node id (also part of the container name).
	ID string
	// Group is the node's fixed group name, or with group auto the group
	// its /v1/status named when last read (RefreshGroups).
	Group string
	// Auto marks a node started with group auto.
	Auto bool `json:"auto,omitempty"`
	// IP is the node's static address on the cluster network.
	IP string
	// Container is the container name.
	Container string
	// Volume is the named volume holding the node's data dir.
	Volume string
	// Bootstrap marks the first node of its group.
	Bootstrap bool
	// Join are the Serf addresses the node retries joining.
	Join []string
	// Env are extra "KEY=value" variables of this node's container, after
	// ClusterConfig.Env (the older build's pin, OldBuildEnv).
	Env []string `json:"env,omitempty"`
}

// OldBuildEnv makes a node's agent stand in for an older build: it speaks
// shard log format 1 only (GHBA_TEST_PIN_LOG_FORMAT, node.WithLogFormatPin).
// ClusterConfig.OldBuild starts every node so; FaultRollingUpgrade
// upgrades them.
var OldBuildEnv = []string{"GHBA_TEST_PIN_LOG_FORMAT=1"}

// RPCAddr is the node's RPC address, reachable from the host.
func (n *Node) RPCAddr() string { return net.JoinHostPort(n.IP, strconv.Itoa(portRPC)) }

// HTTPAddr is the node's HTTP address, reachable from the host.
func (n *Node) HTTPAddr() string { return net.JoinHostPort(n.IP, strconv.Itoa(portHTTP)) }

// SerfAddr is the node's Serf address.
func (n *Node) SerfAddr() string { return net.JoinHostPort(n.IP, strconv.Itoa(portSerf)) }

// ClusterConfig describes the cluster to start.
type ClusterConfig struct {
	// Prefix makes every container, network and volume name unique to a run.
	Prefix string
	// Image is the node image.
	Image string
	// Groups is the number of groups (2 or 3); PerGroup the nodes in each.
	Groups, PerGroup int
	// Auto starts every node with group auto and max_group_size PerGroup,
	// one after the other, so that the groups form by splits.
	Auto bool
	// Log receives progress.
	Log *slog.Logger
	// Rand chooses the subnet.
	Rand *rand.Rand
	// Env are extra "KEY=value" variables of every node's container.
	Env []string
	// OldBuild starts every node as the older build of a rolling upgrade
	// (OldBuildEnv).
	OldBuild bool
	// Replication is the nodes' replication factor (0: the agent's
	// default, 3); a shard has min(Replication, group size) replicas.
	Replication int
}

// Cluster is a running set of node containers on a private network.
type Cluster struct {
	cfg     ClusterConfig
	docker  *Docker
	log     *slog.Logger
	Network string
	Nodes   []*Node
	// Retired are the extra nodes that left the cluster (their stopped
	// containers keep their logs).
	Retired []*Node
	http    *http.Client
	base    string // the network's first three octets
	nextID  int    // the number of the next extra node

	mu      sync.Mutex
	created []string // containers created, for cleanup
	volumes []string // volumes created, for cleanup
	wiped   []wipedContainer
}

// wipedContainer is the container of a node before a wipe, kept stopped
// for its logs.
type wipedContainer struct {
	name      string // for the log file: "n3-wiped1"
	container string
}

// NewCluster creates the network and describes the nodes; Start runs them.
// Call Close (even after an error) to remove what was created.
func NewCluster(ctx context.Context, d *Docker, cfg ClusterConfig) (*Cluster, error) {
	c := &Cluster{cfg: cfg, docker: d, log: cfg.Log, Network: cfg.Prefix + "-net",
		http: &http.Client{Timeout: 3 * time.Second}}
	// A /24 in 10.200–249.x that no other network of this engine uses;
	// docker refuses an overlapping one, so try a few.
	var base string
	var lastErr error
	for range 20 {
		base = fmt.Sprintf("10.%d.%d", 200+cfg.Rand.IntN(50), cfg.Rand.IntN(256))
		_, lastErr = d.Run(ctx, "network", "create", "--driver", "bridge", "--subnet", base+".0/24",
			"--label", labelRun+"="+cfg.Prefix, "--label", labelOwner+"="+runOwner(), c.Network)
		if lastErr == nil {
			break
		}
		if !strings.Contains(lastErr.Error(), "overlap") {
			return c, fmt.Errorf("chaos: create network: %w", lastErr)
		}
	}
	if lastErr != nil {
		return c, fmt.Errorf("chaos: create network: %w", lastErr)
	}
	c.base = base
	c.nextID = cfg.Groups*cfg.PerGroup + 1
	if cfg.Auto {
		for k := 1; k < c.nextID; k++ {
			c.Nodes = append(c.Nodes, c.autoNode(k))
		}
		return c, nil
	}
	for g := range cfg.Groups {
		var first *Node
		for i := range cfg.PerGroup {
			k := g*cfg.PerGroup + i + 1
			n := &Node{
				ID:        fmt.Sprintf("n%d", k),
				Group:     fmt.Sprintf("g%d", g+1),
				IP:        fmt.Sprintf("%s.%d", base, 10+k),
				Container: fmt.Sprintf("%s-n%d", cfg.Prefix, k),
				Volume:    fmt.Sprintf("%s-n%d", cfg.Prefix, k),
			}
			switch {
			case i == 0 && g == 0:
				n.Bootstrap = true // the cluster's first node: homes "/"
			case i == 0:
				n.Bootstrap = true // its group's first node; joins the cluster
				n.Join = []string{c.Nodes[0].SerfAddr()}
			default:
				n.Join = []string{first.SerfAddr(), c.Nodes[0].SerfAddr()}
			}
			if i == 0 {
				first = n
			}
			c.Nodes = append(c.Nodes, n)
		}
	}
	return c, nil
}

// autoNode describes node k with group auto: n1 bootstraps the cluster,
// the others retry joining up to three earlier nodes.
func (c *Cluster) autoNode(k int) *Node {
	n := &Node{
		ID:        fmt.Sprintf("n%d", k),
		Auto:      true,
		IP:        fmt.Sprintf("%s.%d", c.base, 10+k),
		Container: fmt.Sprintf("%s-n%d", c.cfg.Prefix, k),
		Volume:    fmt.Sprintf("%s-n%d", c.cfg.Prefix, k),
		Bootstrap: k == 1,
	}
	for j := 1; j < k && j <= 3; j++ {
		n.Join = append(n.Join, net.JoinHostPort(fmt.Sprintf("%s.%d", c.base, 10+j), strconv.Itoa(portSerf)))
	}
	return n
}

// Start runs every node's container, group by group, and waits until the
// cluster has formed. With group auto the nodes start one after the
// other, each once the previous ones are in groups of at most PerGroup.
func (c *Cluster) Start(ctx context.Context) error {
	if c.cfg.OldBuild {
		c.mu.Lock()
		for _, n := range c.Nodes {
			n.Env = OldBuildEnv
		}
		c.mu.Unlock()
	}
	if c.cfg.Auto {
		for i, n := range c.Nodes {
			if err := c.run(ctx, n); err != nil {
				return err
			}
			if err := c.WaitConverged(ctx, 120*time.Second, c.Nodes[:i+1]...); err != nil {
				return fmt.Errorf("after starting %s: %w", n.ID, err)
			}
		}
		return nil
	}
	for i, n := range c.Nodes {
		if err := c.run(ctx, n); err != nil {
			return err
		}
		if i == 0 || n.Bootstrap {
			// A group's first node must be up (and, for n1, own "/")
			// before others join through it.
			if err := c.waitNodeUp(ctx, n, 90*time.Second); err != nil {
				return err
			}
		}
	}
	return c.WaitConverged(ctx, 120*time.Second)
}

func (c *Cluster) run(ctx context.Context, n *Node) error {
	// The volume explicitly, with the run's labels (docker run -v would
	// create it without them, and a later run's sweep could not tell
	// whose it is).
	c.mu.Lock()
	if !slices.Contains(c.volumes, n.Volume) {
		c.volumes = append(c.volumes, n.Volume)
	}
	c.mu.Unlock()
	if _, err := c.docker.Run(ctx, "volume", "create", "--label", labelRun+"="+c.cfg.Prefix,
		"--label", labelOwner+"="+runOwner(), n.Volume); err != nil {
		return fmt.Errorf("chaos: create the volume of %s: %w", n.ID, err)
	}
	args := []string{"run", "-d", "--name", n.Container, "--network", c.Network, "--ip", n.IP,
		"--label", labelRun + "=" + c.cfg.Prefix, "--label", labelOwner + "=" + runOwner(),
		"-v", n.Volume + ":/data", "--stop-timeout", "20"}
	if c.cfg.Replication > 0 {
		args = append(args, "-e", "GHBA_REPLICATION="+strconv.Itoa(c.cfg.Replication))
	}
	for _, e := range slices.Concat(c.cfg.Env, n.Env) {
		args = append(args, "-e", e)
	}
	args = append(args, c.cfg.Image, "agent",
		"--node-id", n.ID, "--data-dir", "/data", "--bind-addr", "0.0.0.0", "--advertise-addr", n.IP,
		"--rpc-port", strconv.Itoa(portRPC), "--raft-port", strconv.Itoa(portRaft),
		"--serf-port", strconv.Itoa(portSerf), "--http-port", strconv.Itoa(portHTTP))
	if n.Auto {
		args = append(args, "--group", "auto", "--max-group-size", strconv.Itoa(c.cfg.PerGroup))
	} else {
		args = append(args, "--group", n.Group, "--max-group-size", "9")
	}
	if n.Bootstrap {
		args = append(args, "--bootstrap")
	}
	if len(n.Join) > 0 {
		args = append(args, "--retry-join", strings.Join(n.Join, ","))
	}
	c.mu.Lock()
	if !slices.Contains(c.created, n.Container) {
		c.created = append(c.created, n.Container)
	}
	c.mu.Unlock()
	if _, err := c.docker.Run(ctx, args...); err != nil {
		return fmt.Errorf("chaos: start %s: %w", n.ID, err)
	}
	c.log.Info("node container started", "node", n.ID, "group", cmp.Or(n.Group, "auto"), "ip", n.IP)
	return nil
}

// RunCommand runs the cluster's image once, in a container called
// PREFIX-name on the cluster's network, with args as its command (a ghba
// command: "--addr", ..., "bench", ...), waits until it exits (at most
// timeout) and returns its standard output. Close removes the container
// if it is still there.
func (c *Cluster) RunCommand(ctx context.Context, timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	container := c.CommandContainer(name)
	c.mu.Lock()
	if !slices.Contains(c.created, container) {
		c.created = append(c.created, container)
	}
	c.mu.Unlock()
	run := []string{"run", "--rm", "--name", container, "--network", c.Network}
	for _, l := range RunLabels(c.cfg.Prefix) {
		run = append(run, "--label", l)
	}
	out, err := c.docker.run(ctx, nil, "docker", slices.Concat(run, []string{c.cfg.Image}, args)...)
	if err != nil {
		return out, fmt.Errorf("chaos: run %s: %w", name, err)
	}
	return out, nil
}

// CommandContainer is the name of RunCommand's container called name.
func (c *Cluster) CommandContainer(name string) string { return c.cfg.Prefix + "-" + name }

// LimitCPU limits every node's container to cpus cores from now on, in
// CFS periods of 10 ms (docker update --cpu-period --cpu-quota): with
// docker's default period of 100 ms a node limited to 0.1 core would run
// for 10 ms and then stall for 90, and every request that met a stall
// would wait for it.
func (c *Cluster) LimitCPU(ctx context.Context, cpus float64) error {
	const period = 10_000                // µs
	quota := max(int(cpus*period), 1000) // the kernel's least quota is 1 ms
	args := []string{"update", "--cpu-period", strconv.Itoa(period), "--cpu-quota", strconv.Itoa(quota)}
	for _, n := range c.Nodes {
		args = append(args, n.Container)
	}
	if _, err := c.docker.Run(ctx, args...); err != nil {
		return fmt.Errorf("chaos: limit the nodes to %g CPUs: %w", cpus, err)
	}
	return nil
}

// Status is the part of a node's /v1/status the harness reads.
type Status struct {
	NodeID   string `json:"node_id"`
	Group    string `json:"group"`
	RaftRole string `json:"raft_role"`
	Leader   string `json:"leader"`
	Joined   bool   `json:"joined"`
	RootHome string `json:"root_home"`
	// GroupSwitches counts the node's moves to another group.
	GroupSwitches uint64 `json:"group_switches"`
	Peers         []struct {
		ID string `json:"id"`
		Up bool   `json:"up"`
	} `json:"peers"`
	// Replicas are the shard replicas the node hosts.
	Replicas []ReplicaStatus `json:"replicas"`
}

// ReplicaStatus is one shard replica in a node's /v1/status.
type ReplicaStatus struct {
	Shard string `json:"shard"`
	// Leading reports that this replica leads the shard.
	Leading bool `json:"leading"`
	// Owner is the shard's preferred leader.
	Owner string `json:"owner"`
	// Members are the voters (node ids; "node@incarnation" for a replica
	// of a lost data directory) and Learners the replicas catching up, as
	// this replica knows them.
	Members  []string `json:"members"`
	Learners []string `json:"learners"`
}

// defaultReplication is the agent's default replication factor.
const defaultReplication = 3

// replication is the nodes' replication factor.
func (c *Cluster) replication() int { return cmp.Or(c.cfg.Replication, defaultReplication) }

// Status reads n's /v1/status.
func (c *Cluster) Status(ctx context.Context, n *Node) (*Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.HTTPAddr()+"/v1/status", nil)
	if err != nil {
		return nil, fmt.Errorf("chaos: status of %s: %w", n.ID, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("chaos: status of %s: %w", n.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("chaos: status of %s: HTTP %s", n.ID, resp.Status)
	}
	var s Status
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return nil, fmt.Errorf("chaos: status of %s: %w", n.ID, err)
	}
	return &s, nil
}

// nodeReady reports why s is not yet a fully working member of a cluster
// of the given nodes ("" if it is).
func nodeReady(s *Status, all []*Node) string {
	switch {
	case !s.Joined:
		return "not joined"
	case s.Leader == "":
		return "no group leader"
	case s.RootHome == "":
		return "no root home"
	}
	up := make(map[string]bool)
	for _, p := range s.Peers {
		up[p.ID] = p.Up
	}
	for _, n := range all {
		if n.ID != s.NodeID && !up[n.ID] {
			return "sees " + n.ID + " down"
		}
	}
	return ""
}

func (c *Cluster) waitNodeUp(ctx context.Context, n *Node, timeout time.Duration) error {
	return poll(ctx, timeout, func(ctx context.Context) (string, error) {
		s, err := c.Status(ctx, n)
		if err != nil {
			return err.Error(), nil
		}
		if !s.Joined || s.Leader == "" || s.RootHome == "" {
			return fmt.Sprintf("%s: joined=%v leader=%q root=%q", n.ID, s.Joined, s.Leader, s.RootHome), nil
		}
		return "", nil
	})
}

// WaitConverged waits until every node (of nodes, by default all) answers
// its status, is joined, knows its group's leader and the root home, and
// sees every other node up. With group auto it also waits until every
// group has at most PerGroup members and its members agree on its leader,
// and then records each node's group (Node.Group).
func (c *Cluster) WaitConverged(ctx context.Context, timeout time.Duration, nodes ...*Node) error {
	if len(nodes) == 0 {
		nodes = c.Nodes
	}
	start := time.Now()
	var groups map[string]string
	err := poll(ctx, timeout, func(ctx context.Context) (string, error) {
		groups = make(map[string]string)
		leaders := make(map[string]string)
		sizes := make(map[string]int)
		for _, n := range nodes {
			s, err := c.Status(ctx, n)
			if err != nil {
				return err.Error(), nil
			}
			if why := nodeReady(s, nodes); why != "" {
				return n.ID + ": " + why, nil
			}
			if s.Group == "" {
				return n.ID + ": in no group", nil
			}
			groups[n.ID] = s.Group
			sizes[s.Group]++
			if l, ok := leaders[s.Group]; ok && l != s.Leader {
				return fmt.Sprintf("group %s: leaders %s and %s", s.Group, l, s.Leader), nil
			}
			leaders[s.Group] = s.Leader
		}
		if c.cfg.Auto {
			for g, k := range sizes {
				if k > c.cfg.PerGroup {
					return fmt.Sprintf("group %s has %d members", g, k), nil
				}
			}
		}
		return "", nil
	})
	if err != nil {
		return fmt.Errorf("chaos: cluster did not converge: %w", err)
	}
	if c.cfg.Auto {
		c.mu.Lock()
		for _, n := range nodes {
			n.Group = groups[n.ID]
		}
		c.mu.Unlock()
	}
	c.log.Info("cluster converged", "nodes", len(nodes), "groups", groupList(groups), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// groupList renders node→group as "g1[n1 n2] g2[n3]".
func groupList(groups map[string]string) string {
	by := make(map[string][]string)
	for id, g := range groups {
		by[g] = append(by[g], id)
	}
	names := slices.Sorted(maps.Keys(by))
	var b strings.Builder
	for i, g := range names {
		if i > 0 {
			b.WriteByte(' ')
		}
		ids := by[g]
		slices.Sort(ids)
		fmt.Fprintf(&b, "%s[%s]", g, strings.Join(ids, " "))
	}
	return b.String()
}

// RefreshGroups reads every node's group from its /v1/status (groups
// change with group auto); every node must answer and be in a group.
func (c *Cluster) RefreshGroups(ctx context.Context) error {
	if !c.cfg.Auto {
		return nil
	}
	groups := make(map[string]string)
	for _, n := range c.Nodes {
		s, err := c.Status(ctx, n)
		if err != nil {
			return err
		}
		if !s.Joined || s.Group == "" {
			return fmt.Errorf("chaos: %s is in no group (joined %v, group %q)", n.ID, s.Joined, s.Group)
		}
		groups[n.ID] = s.Group
	}
	c.mu.Lock()
	for _, n := range c.Nodes {
		n.Group = groups[n.ID]
	}
	c.mu.Unlock()
	c.log.Info("groups", "groups", groupList(groups))
	return nil
}

// AddExtra starts one more auto node (n10, n11, ...) joining through the
// first three nodes and adds it to Nodes.
func (c *Cluster) AddExtra(ctx context.Context) (*Node, error) {
	n := c.autoNode(c.nextID)
	n.Bootstrap = false
	c.nextID++
	if err := c.run(ctx, n); err != nil {
		return n, err
	}
	c.Nodes = append(c.Nodes, n)
	return n, nil
}

// Retire moves n from Nodes to Retired.
func (c *Cluster) Retire(n *Node) {
	c.Nodes = slices.DeleteFunc(c.Nodes, func(m *Node) bool { return m == n })
	c.Retired = append(c.Retired, n)
}

// Leader returns the Raft leader of group g as a member of g reports it.
func (c *Cluster) Leader(ctx context.Context, g string) (*Node, error) {
	for _, n := range c.Nodes {
		if n.Group != g {
			continue
		}
		s, err := c.Status(ctx, n)
		if err != nil || s.Leader == "" {
			continue
		}
		if l := c.Node(s.Leader); l != nil {
			return l, nil
		}
	}
	return nil, fmt.Errorf("chaos: no member of %s names a leader", g)
}

// Node returns the node with id, or nil.
func (c *Cluster) Node(id string) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Groups returns the group names in order.
func (c *Cluster) Groups() []string {
	var gs []string
	for _, n := range c.Nodes {
		if !slices.Contains(gs, n.Group) {
			gs = append(gs, n.Group)
		}
	}
	return gs
}

// RPCAddrs returns every node's RPC address.
func (c *Cluster) RPCAddrs() []string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.RPCAddr())
	}
	return a
}

// SaveLogs writes every node's docker logs (stdout and stderr) to dir,
// and those of the containers wiped nodes ran in before (n3-wiped1.log).
func (c *Cluster) SaveLogs(ctx context.Context, dir string) {
	var logs []wipedContainer
	for _, n := range slices.Concat(c.Nodes, c.Retired) {
		logs = append(logs, wipedContainer{name: n.ID, container: n.Container})
	}
	c.mu.Lock()
	logs = append(logs, c.wiped...)
	c.mu.Unlock()
	for _, l := range logs {
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := c.docker.runCombined(lctx, "docker", "logs", "-t", l.container)
		cancel()
		if err != nil {
			out = append(out, []byte("\n[chaos: docker logs failed: "+err.Error()+"]\n")...)
		}
		if werr := os.WriteFile(filepath.Join(dir, l.name+".log"), out, 0o644); werr != nil {
			c.log.Warn("save logs", "node", l.name, "err", werr)
		}
	}
}

// Wipe runs n, whose container was killed, again without its data: the
// old container is renamed (kept stopped, for its logs) and taken off the
// network, and a new one of the same name, address, node id and group
// starts on a new, empty volume. It does not bootstrap (its group exists
// without it) and joins through its group-mates and a node of another
// group, as an operator replacing a lost disk would start it.
func (c *Cluster) Wipe(ctx context.Context, n *Node) error {
	c.mu.Lock()
	k := len(c.wiped) + 1
	old := wipedContainer{name: fmt.Sprintf("%s-wiped%d", n.ID, k), container: fmt.Sprintf("%s-wiped%d", n.Container, k)}
	c.created = append(c.created, old.container)
	c.wiped = append(c.wiped, old)
	c.mu.Unlock()
	if _, err := c.docker.Run(ctx, "rename", n.Container, old.container); err != nil {
		return fmt.Errorf("chaos: wipe of %s: %w", n.ID, err)
	}
	if _, err := c.docker.Run(ctx, "network", "disconnect", "-f", c.Network, old.container); err != nil {
		return fmt.Errorf("chaos: wipe of %s: %w", n.ID, err)
	}
	var mates, others []string
	for _, m := range c.Nodes {
		switch {
		case m == n:
		case m.Group == n.Group:
			mates = append(mates, m.SerfAddr())
		case len(others) < 2:
			others = append(others, m.SerfAddr())
		}
	}
	c.mu.Lock()
	n.Volume = fmt.Sprintf("%s-w%d", n.Container, k)
	n.Bootstrap = false
	n.Join = slices.Concat(mates, others)
	c.mu.Unlock()
	if err := c.run(ctx, n); err != nil {
		return fmt.Errorf("chaos: wipe of %s: %w", n.ID, err)
	}
	return nil
}

// Recreate stops n's container gracefully (SIGTERM: the agent hands its
// leaderships over before it exits), keeps it stopped under another name
// for its logs (n3-before1.log) and starts a new one on the same volume,
// address and id with env as n.Env: a node restarted with another build
// (FaultRollingUpgrade).
func (c *Cluster) Recreate(ctx context.Context, n *Node, env []string) error {
	if _, err := c.docker.Run(ctx, "stop", "-t", "20", n.Container); err != nil {
		return fmt.Errorf("chaos: stop %s: %w", n.ID, err)
	}
	c.mu.Lock()
	k := len(c.wiped) + 1
	old := wipedContainer{name: fmt.Sprintf("%s-before%d", n.ID, k), container: fmt.Sprintf("%s-before%d", n.Container, k)}
	c.created = append(c.created, old.container)
	c.wiped = append(c.wiped, old)
	c.mu.Unlock()
	if _, err := c.docker.Run(ctx, "rename", n.Container, old.container); err != nil {
		return fmt.Errorf("chaos: recreate %s: %w", n.ID, err)
	}
	if _, err := c.docker.Run(ctx, "network", "disconnect", "-f", c.Network, old.container); err != nil {
		return fmt.Errorf("chaos: recreate %s: %w", n.ID, err)
	}
	c.mu.Lock()
	n.Env = env
	c.mu.Unlock()
	return c.run(ctx, n)
}

// LogFormatInUse returns the oldest shard log format in use that a node
// reports for any member (ghba members' log_format_in_use), as the first
// node that answers sees them.
func (c *Cluster) LogFormatInUse(ctx context.Context) (int, error) {
	cl := client.New(client.Options{Addrs: c.RPCAddrs(), Logger: c.log, HomeCacheSize: -1, Timeout: 10 * time.Second})
	defer cl.Close()
	r, err := cl.Members(ctx)
	if err != nil {
		return 0, fmt.Errorf("chaos: members: %w", err)
	}
	v := 0
	for _, m := range r.Members {
		if m.Status != "left" && (v == 0 || m.LogFormatInUse < v) {
			v = m.LogFormatInUse
		}
	}
	return v, nil
}

// statuses reads the /v1/status of every node but skip; nodes that do not
// answer are left out.
func (c *Cluster) statuses(ctx context.Context, skip *Node) map[*Node]*Status {
	out := make(map[*Node]*Status)
	for _, n := range c.Nodes {
		if n == skip {
			continue
		}
		if s, err := c.Status(ctx, n); err == nil {
			out[n] = s
		}
	}
	return out
}

// Shards returns the shards the nodes that answer host, sorted.
func (c *Cluster) Shards(ctx context.Context) ([]string, error) {
	var out []string
	for _, s := range c.statuses(ctx, nil) {
		for _, r := range s.Replicas {
			if !slices.Contains(out, r.Shard) {
				out = append(out, r.Shard)
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("chaos: no node reports a shard replica")
	}
	slices.Sort(out)
	return out, nil
}

// ShardLeader returns the node whose replica of shard reports that it
// leads it (in its /v1/status), asking every node but skip; nil if none
// does.
func (c *Cluster) ShardLeader(ctx context.Context, shard string, skip *Node) *Node {
	for n, s := range c.statuses(ctx, skip) {
		for _, r := range s.Replicas {
			if r.Shard == shard && r.Leading {
				return n
			}
		}
	}
	return nil
}

// shardsSettled reports why the shards, as the statuses show them, are not
// settled ("" if they are): every shard has exactly one leader, its owner
// if it has one, and min(replication, size of its group) voters, every
// one a node's current replica, and no replica catching up.
func shardsSettled(sts map[*Node]*Status, replication int) string {
	size := make(map[string]int)
	for _, s := range sts {
		size[s.Group]++
	}
	type lead struct {
		node  *Node
		group string
		r     ReplicaStatus
	}
	leads := make(map[string][]lead)
	for n, s := range sts {
		for _, r := range s.Replicas {
			if _, ok := leads[r.Shard]; !ok {
				leads[r.Shard] = nil
			}
			if r.Leading {
				leads[r.Shard] = append(leads[r.Shard], lead{n, s.Group, r})
			}
		}
	}
	for _, sh := range slices.Sorted(maps.Keys(leads)) {
		ls := leads[sh]
		if len(ls) != 1 {
			var ids []string
			for _, l := range ls {
				ids = append(ids, l.node.ID)
			}
			return fmt.Sprintf("shard %s: leaders %v", sh, ids)
		}
		l := ls[0]
		want := min(replication, size[l.group])
		switch {
		case l.r.Owner != "" && l.r.Owner != l.node.ID:
			return fmt.Sprintf("shard %s: led by %s, owner %s", sh, l.node.ID, l.r.Owner)
		case len(l.r.Learners) > 0:
			return fmt.Sprintf("shard %s: replicas %v catching up", sh, l.r.Learners)
		case len(l.r.Members) != want:
			return fmt.Sprintf("shard %s: voters %v, want %d", sh, l.r.Members, want)
		case slices.ContainsFunc(l.r.Members, func(m string) bool { return strings.Contains(m, "@") }):
			return fmt.Sprintf("shard %s: voters %v include a lost replica", sh, l.r.Members)
		}
	}
	return ""
}

// WaitShardsSettled waits until every node answers its status and the
// shards are settled (see shardsSettled): every shard led by its owner,
// with all its replicas voting, none catching up.
func (c *Cluster) WaitShardsSettled(ctx context.Context, timeout time.Duration) error {
	start := time.Now()
	err := poll(ctx, timeout, func(ctx context.Context) (string, error) {
		sts := c.statuses(ctx, nil)
		if len(sts) < len(c.Nodes) {
			return fmt.Sprintf("%d of %d nodes answer their status", len(sts), len(c.Nodes)), nil
		}
		return shardsSettled(sts, c.replication()), nil
	})
	if err != nil {
		return fmt.Errorf("chaos: shards did not settle: %w", err)
	}
	c.log.Info("shards settled", "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// Close removes the containers, the network and the volumes, best effort,
// until ctx is done (it runs from t.Cleanup, with a context of its own).
func (c *Cluster) Close(ctx context.Context) error {
	var errs []error
	c.mu.Lock()
	created := slices.Clone(c.created)
	c.mu.Unlock()
	if len(created) > 0 {
		// A paused container cannot be removed by some engines: unpause first.
		for _, n := range created {
			_, _ = c.docker.Run(ctx, "unpause", n)
		}
		if _, err := c.docker.Run(ctx, append([]string{"rm", "-f", "-v"}, created...)...); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := c.docker.Run(ctx, "network", "rm", c.Network); err != nil && !strings.Contains(err.Error(), "not found") {
		errs = append(errs, err)
	}
	c.mu.Lock()
	vols := slices.Clone(c.volumes)
	c.mu.Unlock()
	if len(vols) > 0 {
		if _, err := c.docker.Run(ctx, append([]string{"volume", "rm", "-f"}, vols...)...); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// poll calls check until it returns "" (done) or an error, or until
// timeout; the last reason is in the timeout error.
func poll(ctx context.Context, timeout time.Duration, check func(ctx context.Context) (string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(300 * time.Millisecond)
	defer t.Stop()
	last := ""
	for {
		why, err := check(ctx)
		if err != nil {
			return err
		}
		if why == "" {
			return nil
		}
		if ctx.Err() == nil || last == "" {
			// (A check cut short by the deadline says less than the
			// one before.)
			last = why
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %s: %s: %w", timeout, last, ctx.Err())
		case <-t.C:
		}
	}
}
