package main

// End-to-end tests with the real binary: the cluster runs as separate OS
// processes ("ghba agent"), driven through the CLI (exit codes, --json
// output) and through client.Client for bulk work. The binary is built once
// (normal build, not -race) into a temporary directory that TestMain
// removes. All tests here are skipped with -short.
//
//	nice -n 10 go test -tags hashicorpmetrics -race -run Process -count=1 -v ./cmd/ghba/

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// Bounds of the multi-process tests.
const (
	procGroup        = "g1"
	procReadyTimeout = 90 * time.Second // cluster formation, restart, join
	procStopTimeout  = 30 * time.Second // SIGTERM → exit
	procCLITimeout   = 60 * time.Second // one CLI process
	procPollInterval = 200 * time.Millisecond
	procRPCTimeout   = 15 * time.Second
	procLogTailLines = 120
)

// procBin is the ghba binary built once for all multi-process tests.
var procBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if procBin.dir != "" {
		os.RemoveAll(procBin.dir)
	}
	os.Exit(code)
}

// procBinary skips the test under -short and returns the path of the ghba
// binary, building it on first use from the module root (go env GOMOD), or
// the one GHBA_PROCESS_TEST_BIN names (a build of another commit, to
// compare: issue 34's figures before the change).
func procBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process test: builds ghba and runs agents as separate processes")
	}
	if bin := os.Getenv("GHBA_PROCESS_TEST_BIN"); bin != "" {
		return bin
	}
	procBin.once.Do(func() {
		gomod, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			procBin.err = fmt.Errorf("go env GOMOD: %w", err)
			return
		}
		mod := strings.TrimSpace(string(gomod))
		if mod == "" || mod == os.DevNull {
			procBin.err = errors.New("go env GOMOD: not in a module")
			return
		}
		dir, err := os.MkdirTemp("", "ghba-process-test-")
		if err != nil {
			procBin.err = err
			return
		}
		procBin.dir = dir
		bin := filepath.Join(dir, "ghba")
		cmd := exec.Command("go", "build", "-tags", "hashicorpmetrics", "-o", bin, "./cmd/ghba")
		cmd.Dir = filepath.Dir(mod)
		if out, err := cmd.CombinedOutput(); err != nil {
			procBin.err = fmt.Errorf("go build ./cmd/ghba: %w\n%s", err, out)
			return
		}
		procBin.path = bin
	})
	if procBin.err != nil {
		t.Fatal(procBin.err)
	}
	return procBin.path
}

// procEnv is the environment of agents and CLI processes: the test's,
// without GHBA_* variables (which would override the configs and --addr).
func procEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GHBA_") {
			env = append(env, kv)
		}
	}
	return env
}

// procRun is one execution of an agent process.
type procRun struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has been reaped
	err    error         // cmd.Wait's result, valid after exited
}

// procNode is one agent of a procCluster.
type procNode struct {
	id                    string
	rpc, raft, serf, http int
	bootstrap             bool
	join                  []string
	group                 string // fixed group name (procGroup by default)
	dataDir, cfg, log     string
	run                   *procRun
	starts                int
	// env is added to the agent's environment (procEnv) at each start.
	env []string
}

func (n *procNode) rpcAddr() string  { return "127.0.0.1:" + strconv.Itoa(n.rpc) }
func (n *procNode) serfAddr() string { return "127.0.0.1:" + strconv.Itoa(n.serf) }

// alive reports whether the node's current process is running.
func (n *procNode) alive() bool {
	if n.run == nil {
		return false
	}
	select {
	case <-n.run.exited:
		return false
	default:
		return true
	}
}

// procCluster runs agents as processes with configs, data and logs in a
// temporary directory. Its methods are called from the test goroutine,
// except client, which is safe for concurrent use.
type procCluster struct {
	t     testing.TB
	bin   string
	dir   string
	nodes []*procNode
	used  map[int]bool // ports handed out
	// replication is every node's replication setting (R).
	replication int
	// logStore is every node's shard_log_store ("": the default).
	logStore string
	// tls, when set (useTLS), secures every node added after it, and the
	// harness's CLI runs, RPC clients and status requests.
	tls *procTLS
	// aclConfig, when set, is appended to the config of every node added
	// after it (the acl section, see TestProcessACL).
	aclConfig string
	// extraConfig, when set, is appended to the config of every node
	// added after it (YAML keys).
	extraConfig string
	// token, when set, is the ACL token the harness's CLI runs and RPC
	// clients present (set it before the first client call).
	token string

	mu      sync.Mutex
	clients map[string]*client.Client
	// leaderApplied is each shard leader's applied index at the last poll
	// of shardsSettled (a replica has caught up once it has applied it).
	leaderApplied map[string]uint64
}

// newProcCluster prepares (does not start) n nodes with the default
// replication (3): node1 bootstraps, the others retry_join node1's Serf
// address.
func newProcCluster(t testing.TB, n int) *procCluster { return newProcClusterR(t, n, 3) }

// newProcClusterR is newProcCluster with replication r.
func newProcClusterR(t testing.TB, n, r int) *procCluster { return newProcClusterLogs(t, n, r, "") }

// newProcClusterLogs is newProcCluster with replication r and the shard
// log store logStore.
func newProcClusterLogs(t testing.TB, n, r int, logStore string) *procCluster {
	c := &procCluster{t: t, bin: procBinary(t), dir: t.TempDir(), used: map[int]bool{}, clients: map[string]*client.Client{},
		replication: r, logStore: logStore}
	t.Cleanup(c.cleanup)
	for range n {
		c.addNode()
	}
	return c
}

// addNode prepares one more node (not started) on free ports.
func (c *procCluster) addNode() *procNode {
	c.t.Helper()
	return c.addNodeWith(procNodeOpts{})
}

// procNodeOpts are the per-node config settings of addNodeWith; zero
// values mean the defaults of addNode.
type procNodeOpts struct {
	// Group is the fixed group name (default procGroup).
	Group string
	// Bootstrap makes the node bootstrap its group. The first node of the
	// cluster always bootstraps; a later bootstrap node still retry_joins
	// node1, founding a new group in the existing cluster.
	Bootstrap bool
	// MaxGroupSize is max_group_size (default 7).
	MaxGroupSize int
	// Scheme is "auto", "ghba" or "hba" (default: the agent's default, auto).
	Scheme string
	// LRUEntries is lru_entries (default 1600); negative means 0.
	LRUEntries int
	// SegmentOnly sets filter_memory_mb to 0: the node holds its G-HBA
	// segment alone, as in the paper (default: the agent's budget, room
	// for every filter of a test cluster).
	SegmentOnly bool
	// Encrypt is the node's gossip key when it is not the cluster's
	// (useTLS).
	Encrypt string
}

// addNodeWith prepares one more node (not started) on free ports with the
// settings of o.
func (c *procCluster) addNodeWith(o procNodeOpts) *procNode {
	c.t.Helper()
	p := nodetest.ProcessPorts(c.t, 4, c.used)
	n := &procNode{
		id:  fmt.Sprintf("node%d", len(c.nodes)+1),
		rpc: p[0], raft: p[1], serf: p[2], http: p[3],
		bootstrap: len(c.nodes) == 0 || o.Bootstrap,
		group:     cmp.Or(o.Group, procGroup),
	}
	if len(c.nodes) > 0 {
		n.join = []string{c.nodes[0].serfAddr()}
	}
	maxGroup := cmp.Or(o.MaxGroupSize, 7)
	lru := max(0, cmp.Or(o.LRUEntries, 1600))
	scheme := ""
	if o.Scheme != "" {
		scheme = "scheme: " + o.Scheme + "\n"
	}
	if o.SegmentOnly {
		scheme += "filter_memory_mb: 0\n"
	}
	if c.tls != nil {
		scheme += c.tls.agentConfig(c.t, n.id, o.Encrypt)
	}
	scheme += c.aclConfig + c.extraConfig
	n.dataDir = filepath.Join(c.dir, n.id, "data")
	n.cfg = filepath.Join(c.dir, n.id, "agent.yaml")
	n.log = filepath.Join(c.dir, n.id, "agent.log")
	if err := os.MkdirAll(filepath.Dir(n.cfg), 0o755); err != nil {
		c.t.Fatal(err)
	}
	var join []string
	for _, j := range n.join {
		join = append(join, strconv.Quote(j))
	}
	cfg := fmt.Sprintf(`node_id: %s
data_dir: %s
bind_addr: 127.0.0.1
ports:
  rpc: %d
  raft: %d
  serf: %d
  http: %d
group: %s
bootstrap: %t
retry_join: [%s]
max_group_size: %d
replication: %d
bits_per_file: 8
filter_capacity: 100000
lru_entries: %d
lru_bits_per_file: 20
propagate_threshold: 0.01
propagate_interval: 500ms
placement: balanced
shard_log_store: %s
log_level: info
%s`, n.id, strconv.Quote(n.dataDir), n.rpc, n.raft, n.serf, n.http, n.group, n.bootstrap, strings.Join(join, ", "), maxGroup, c.replication, lru,
		cmp.Or(c.logStore, "wal"), scheme)
	if err := os.WriteFile(n.cfg, []byte(cfg), 0o644); err != nil {
		c.t.Fatal(err)
	}
	c.nodes = append(c.nodes, n)
	return n
}

// start starts n's agent (again, after a kill or stop) with its config;
// output is appended to its log file.
func (c *procCluster) start(n *procNode) {
	c.t.Helper()
	if n.alive() {
		c.t.Fatalf("%s is already running", n.id)
	}
	f, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	n.starts++
	fmt.Fprintf(f, "===== test: start #%d of %s at %s\n", n.starts, n.id, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.bin, "agent", "--config", n.cfg)
	cmd.Env = append(procEnv(), n.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = procSysProcAttr()
	if err := procStart(cmd); err != nil {
		c.t.Fatalf("starting %s: %v", n.id, err)
	}
	r := &procRun{cmd: cmd, exited: make(chan struct{})}
	go func() {
		r.err = cmd.Wait()
		close(r.exited)
	}()
	n.run = r
	c.t.Logf("%s: started pid %d (rpc %s, serf %s)", n.id, cmd.Process.Pid, n.rpcAddr(), n.serfAddr())
}

// procSpawner is the OS thread every process with procSysProcAttr is
// started from: Linux sends a child's Pdeathsig when the *thread* that
// forked it exits, not the process, and the Go runtime ends threads — one
// a goroutine left locked, as cmd/ghba/mount/difftest's runner does with
// its thread of its own working directory — which killed every agent of a
// test at once. This thread never exits. (Test harness state, shared by
// the package's tests like procBin.)
var procSpawner = func() chan func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the test binary
		for f := range ch {
			f()
		}
	}()
	return ch
}()

// procStart starts cmd from procSpawner's thread.
func procStart(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	procSpawner <- func() { done <- cmd.Start() }
	return <-done
}

// procSysProcAttr asks the kernel to kill an agent when the test process
// dies (Linux's Pdeathsig; set through reflection to keep other systems
// compiling), so that a test binary killed by -timeout leaves no agents
// behind. Start such a process with procStart.
func procSysProcAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{}
	if f := reflect.ValueOf(a).Elem().FieldByName("Pdeathsig"); f.IsValid() && f.CanSet() {
		f.SetInt(int64(syscall.SIGKILL))
	}
	return a
}

// kill sends SIGKILL to n's agent and waits until it is reaped.
func (c *procCluster) kill(n *procNode) {
	c.t.Helper()
	if !n.alive() {
		c.t.Fatalf("kill %s: not running (%v)", n.id, n.run.err)
	}
	if err := n.run.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.t.Fatalf("kill -9 %s: %v", n.id, err)
	}
	select {
	case <-n.run.exited:
	case <-time.After(procStopTimeout):
		c.t.Fatalf("%s not reaped %v after SIGKILL", n.id, procStopTimeout)
	}
	c.t.Logf("%s: killed (kill -9)", n.id)
}

// waitExit waits up to d for n's agent to exit by itself and returns its
// exit status; it fails the test if the process is still running then.
func (c *procCluster) waitExit(n *procNode, d time.Duration) error {
	c.t.Helper()
	select {
	case <-n.run.exited:
		return n.run.err
	case <-time.After(d):
		c.t.Fatalf("%s still running %v later", n.id, d)
		return nil
	}
}

// stop sends SIGTERM to n's agent and waits for it; a process that does
// not exit in time is killed. It returns the exit status (nil: exit 0).
func (c *procCluster) stop(n *procNode) error {
	if !n.alive() {
		return nil
	}
	_ = n.run.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.run.exited:
		return n.run.err
	case <-time.After(procStopTimeout):
		_ = n.run.cmd.Process.Kill()
		<-n.run.exited
		return fmt.Errorf("did not exit within %v of SIGTERM (killed)", procStopTimeout)
	}
}

// cleanup stops every running agent and closes the clients. After a pass
// the agents get SIGTERM (a clean shutdown must exit 0). After a failure
// they get SIGQUIT, so their goroutine stacks end up in the logs; the end of
// every log is printed, and with GHBA_PROCESS_TEST_LOGS=DIR the whole logs
// are copied to DIR.
func (c *procCluster) cleanup() {
	failed := c.t.Failed()
	// The log lines before the stack dumps are the ones to print.
	sizes := make([]int64, len(c.nodes))
	for i, n := range c.nodes {
		sizes[i] = -1
		if fi, err := os.Stat(n.log); err == nil {
			sizes[i] = fi.Size()
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(c.nodes))
	for i, n := range c.nodes {
		if !n.alive() {
			continue
		}
		if failed {
			wg.Go(func() { c.quit(n) })
		} else {
			wg.Go(func() { errs[i] = c.stop(n) })
		}
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			c.t.Errorf("%s: shutdown on SIGTERM: %v", c.nodes[i].id, err)
		}
	}
	c.mu.Lock()
	for _, cl := range c.clients {
		cl.Close()
	}
	c.mu.Unlock()
	if !failed {
		return
	}
	keep := os.Getenv("GHBA_PROCESS_TEST_LOGS")
	for i, n := range c.nodes {
		c.t.Logf("---- last %d lines of %s's log:\n%s", procLogTailLines, n.id, procTail(n.log, procLogTailLines, sizes[i]))
		if keep == "" {
			continue
		}
		dst := filepath.Join(keep, strings.ReplaceAll(c.t.Name(), "/", "_")+"-"+n.id+".log")
		if b, err := os.ReadFile(n.log); err != nil {
			c.t.Logf("keeping %s's log: %v", n.id, err)
		} else if err := os.MkdirAll(keep, 0o755); err != nil {
			c.t.Logf("keeping %s's log: %v", n.id, err)
		} else if err := os.WriteFile(dst, b, 0o644); err != nil {
			c.t.Logf("keeping %s's log: %v", n.id, err)
		} else {
			c.t.Logf("%s's whole log (with goroutine stacks): %s", n.id, dst)
		}
	}
}

// quit sends SIGQUIT to n's agent (the Go runtime writes every goroutine's
// stack to its log and exits) and waits for it, killing it if need be.
func (c *procCluster) quit(n *procNode) {
	_ = n.run.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-n.run.exited:
	case <-time.After(10 * time.Second):
		_ = n.run.cmd.Process.Kill()
		<-n.run.exited
	}
}

// procTail returns the last n lines of the first size bytes of a file
// (size < 0: all of it).
func procTail(file string, n int, size int64) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	if size >= 0 && size < int64(len(b)) {
		b = b[:size]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// checkRunning fails the test if one of nodes has exited.
func (c *procCluster) checkRunning(nodes ...*procNode) {
	c.t.Helper()
	for _, n := range nodes {
		if !n.alive() {
			c.t.Fatalf("%s exited unexpectedly: %v", n.id, n.run.err)
		}
	}
}

// cli runs the ghba binary with args and returns its stdout, stderr and
// exit code.
func (c *procCluster) cli(args ...string) (string, string, int) {
	c.t.Helper()
	return c.runCLI("", nil, "", c.token, args...)
}

// runCLI runs the ghba binary with args, stdin, the cluster's TLS
// settings, the extra environment env and token (if not empty) as
// GHBA_TOKEN, and returns its stdout, stderr and exit code; who names the
// caller in failure messages.
func (c *procCluster) runCLI(who string, env []string, stdin, token string, args ...string) (string, string, int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), procCLITimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = append(append(procEnv(), c.tls.cliEnv()...), env...)
	if token != "" {
		cmd.Env = append(cmd.Env, envToken+"="+token)
	}
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		c.t.Fatalf("%sghba %s: no exit within %v", who, strings.Join(args, " "), procCLITimeout)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errOut.String(), 0
	case errors.As(err, &ee) && ee.Exited():
		return out.String(), errOut.String(), ee.ExitCode()
	}
	c.t.Fatalf("%sghba %s: %v", who, strings.Join(args, " "), err)
	return "", "", -1
}

// at runs a CLI command against n's RPC address.
func (c *procCluster) at(n *procNode, args ...string) (string, string, int) {
	c.t.Helper()
	return c.cli(append([]string{"--addr", n.rpcAddr(), "--timeout", "10s"}, args...)...)
}

// members returns "members --json" as n sees it.
func (c *procCluster) members(n *procNode) ([]rpc.Member, error) {
	out, errOut, code := c.at(n, "--json", "members")
	if code != 0 {
		return nil, fmt.Errorf("members via %s: exit %d: %s", n.id, code, strings.TrimSpace(errOut))
	}
	var ms []rpc.Member
	if err := json.Unmarshal([]byte(out), &ms); err != nil {
		return nil, fmt.Errorf("members --json via %s: %w: %s", n.id, err, out)
	}
	return ms, nil
}

// groups returns "groups --json" as n sees it.
func (c *procCluster) groups(n *procNode) ([]rpc.GroupInfo, error) {
	out, errOut, code := c.at(n, "--json", "groups")
	if code != 0 {
		return nil, fmt.Errorf("groups via %s: exit %d: %s", n.id, code, strings.TrimSpace(errOut))
	}
	var gs []rpc.GroupInfo
	if err := json.Unmarshal([]byte(out), &gs); err != nil {
		return nil, fmt.Errorf("groups --json via %s: %w: %s", n.id, err, out)
	}
	return gs, nil
}

// client returns a client.Client that enters the cluster only at n (no
// home cache, so every request is routed by n).
func (c *procCluster) client(n *procNode) *client.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.clients[n.id]
	if cl == nil {
		cl = client.New(client.Options{Addrs: []string{n.rpcAddr()}, Timeout: procRPCTimeout, HomeCacheSize: -1, Dial: c.tls.dialer(c.t), Token: c.token})
		c.clients[n.id] = cl
	}
	return cl
}

// waitFor polls cond until it holds, failing the test after timeout with
// cond's last explanation. check is called on every round (e.g. to fail
// fast when an agent died).
func (c *procCluster) waitFor(what string, timeout time.Duration, check func(), cond func() (bool, string)) {
	c.t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		if check != nil {
			check()
		}
		ok, why := cond()
		if ok {
			c.t.Logf("%s: after %v", what, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not reached after %v: %s", what, timeout, why)
		}
		time.Sleep(procPollInterval)
	}
}

// waitReady waits until, as each of up sees it, every node in up is alive
// with a Raft role in its group, the groups are exactly those of up, each
// with a leader among up, and each of up answers "stat /".
func (c *procCluster) waitReady(what string, up ...*procNode) {
	c.t.Helper()
	ids := map[string]bool{}
	groupOf := map[string]string{}
	groups := map[string]bool{}
	for _, n := range up {
		ids[n.id] = true
		groupOf[n.id] = n.group
		groups[n.group] = true
	}
	c.waitFor(what, procReadyTimeout, func() { c.checkRunning(up...) }, func() (bool, string) {
		for _, n := range up {
			ms, err := c.members(n)
			if err != nil {
				return false, err.Error()
			}
			seen := 0
			for _, m := range ms {
				if !ids[m.ID] {
					continue
				}
				if m.Status != "alive" || m.Group != groupOf[m.ID] || (m.RaftRole != "leader" && m.RaftRole != "follower") {
					return false, fmt.Sprintf("%s sees %s: status %q group %q raft_role %q", n.id, m.ID, m.Status, m.Group, m.RaftRole)
				}
				seen++
			}
			if seen != len(up) {
				return false, fmt.Sprintf("%s sees %d of %d nodes: %+v", n.id, seen, len(up), ms)
			}
			gs, err := c.groups(n)
			if err != nil {
				return false, err.Error()
			}
			if len(gs) != len(groups) {
				return false, fmt.Sprintf("%s sees groups %+v", n.id, gs)
			}
			for _, g := range gs {
				if !groups[g.Group] || !ids[g.Leader] {
					return false, fmt.Sprintf("%s sees groups %+v", n.id, gs)
				}
			}
			if _, errOut, code := c.at(n, "stat", "/"); code != 0 {
				return false, fmt.Sprintf("stat / via %s: exit %d: %s", n.id, code, strings.TrimSpace(errOut))
			}
			// The node's own view (/v1/status): it has joined the group
			// and its Directory, which routing uses, has every node up.
			// (members shows Serf's view, which may be ahead of it.)
			st, err := c.status(n)
			if err != nil {
				return false, err.Error()
			}
			if !st.Joined {
				return false, fmt.Sprintf("%s: /v1/status says not joined", n.id)
			}
			for _, m := range up {
				if m == n {
					continue
				}
				i := slices.IndexFunc(st.Peers, func(p procPeer) bool { return p.ID == m.id })
				if i < 0 || !st.Peers[i].Up || st.Peers[i].Group != m.group {
					return false, fmt.Sprintf("%s: /v1/status peers %+v: %s not up in %s", n.id, st.Peers, m.id, m.group)
				}
			}
		}
		return c.shardsSettled(up)
	})
}

// shardsSettled reports whether every shard, as the first of up sees
// them, is led by its owner and has min(R, live members of its group)
// replicas, each caught up: it has applied every entry its leader had
// applied at the previous poll. (Under a client load followers apply each
// entry after the leader, once the next append tells them it committed,
// so a replica that keeps up still trails by the entries in flight; with
// no load this is a lag of 0.)
func (c *procCluster) shardsSettled(up []*procNode) (bool, string) {
	perGroup := map[string]int{}
	for _, n := range up {
		perGroup[n.group]++
	}
	ctx, cancel := context.WithTimeout(context.Background(), procRPCTimeout)
	defer cancel()
	ss, err := c.client(up[0]).Shards(ctx)
	if err != nil {
		return false, fmt.Sprintf("shards via %s: %v", up[0].id, err)
	}
	for _, n := range up {
		if !slices.ContainsFunc(ss.Shards, func(s rpc.ShardInfo) bool { return s.Shard == n.id }) {
			return false, fmt.Sprintf("no shard %s yet: %+v", n.id, ss.Shards)
		}
	}
	c.mu.Lock()
	prev := c.leaderApplied
	c.leaderApplied = map[string]uint64{}
	for _, s := range ss.Shards {
		c.leaderApplied[s.Shard] = s.AppliedIndex
	}
	c.mu.Unlock()
	for _, s := range ss.Shards {
		before, polled := prev[s.Shard]
		switch {
		case s.Leader == "" || s.Leader != s.Owner:
			return false, fmt.Sprintf("shard %s: leader %q, owner %q", s.Shard, s.Leader, s.Owner)
		case len(s.Replicas) != min(c.replication, perGroup[s.Group]):
			return false, fmt.Sprintf("shard %s of %s: replicas %v, want %d", s.Shard, s.Group, s.Replicas, min(c.replication, perGroup[s.Group]))
		case len(s.Learners) > 0:
			return false, fmt.Sprintf("shard %s: replicas %v still catching up", s.Shard, s.Learners)
		case !polled || s.AppliedIndex-s.MaxLag < before:
			return false, fmt.Sprintf("shard %s: a replica lags %d entries", s.Shard, s.MaxLag)
		}
	}
	return true, ""
}

// procStatus is the part of /v1/status the tests read.
type procStatus struct {
	NodeID           string          `json:"node_id"`
	Joined           bool            `json:"joined"`
	Peers            []procPeer      `json:"peers"`
	Group            string          `json:"group"`
	RaftRole         string          `json:"raft_role"`
	ReplicasHeld     int             `json:"replicas_held"`
	ReplicasMigrated uint64          `json:"replicas_migrated"`
	L2Members        int             `json:"l2_members"`
	ExtraReplicas    int             `json:"extra_replicas"`
	FilterBytes      int64           `json:"filter_bytes"`
	Levels           rpc.LevelCounts `json:"levels"`
	Hops             uint64          `json:"hops"`
	Multicasts       uint64          `json:"multicasts"`
	Broadcasts       uint64          `json:"broadcasts"`
}

type procPeer struct {
	ID    string `json:"id"`
	Group string `json:"group"`
	Up    bool   `json:"up"`
}

// status fetches n's /v1/status.
func (c *procCluster) status(n *procNode) (*procStatus, error) {
	hc := &http.Client{Timeout: 5 * time.Second}
	scheme := "http"
	if c.tls != nil {
		hc.Transport = &http.Transport{TLSClientConfig: c.tls.clientConfig(c.t)}
		scheme = "https"
	}
	resp, err := hc.Get(scheme + "://127.0.0.1:" + strconv.Itoa(n.http) + "/v1/status")
	if err != nil {
		return nil, fmt.Errorf("%s: /v1/status: %w", n.id, err)
	}
	defer resp.Body.Close()
	var st procStatus
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: /v1/status: %s", n.id, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("%s: /v1/status: %w", n.id, err)
	}
	return &st, nil
}

// startAll starts the bootstrap node, waits until it leads the group, then
// starts the others and waits until the cluster is ready. (Starting all at
// once works too, but nodes that ask to join before the group has a leader
// may wait out a long join backoff.)
func (c *procCluster) startAll() {
	c.t.Helper()
	c.start(c.nodes[0])
	c.waitReady(c.nodes[0].id+" leads the group", c.nodes[0])
	for _, n := range c.nodes[1:] {
		c.start(n)
	}
	c.waitReady(fmt.Sprintf("%d nodes ready", len(c.nodes)), c.nodes...)
}

// leader returns the group's leader as n sees it.
func (c *procCluster) leader(n *procNode) *procNode {
	c.t.Helper()
	gs, err := c.groups(n)
	if err != nil {
		c.t.Fatal(err)
	}
	if len(gs) != 1 {
		c.t.Fatalf("groups: %+v", gs)
	}
	for _, m := range c.nodes {
		if m.id == gs[0].Leader {
			return m
		}
	}
	c.t.Fatalf("no leader in %+v", gs)
	return nil
}

// ---- the model of acknowledged writes ----

// procModel records every acknowledged write (path → type and home) and
// the writes whose outcome is unknown (the call failed; the path may or
// may not exist).
type procModel struct {
	mu        sync.Mutex
	types     map[string]string // acknowledged: path → "file" | "dir"
	homes     map[string]string // path → home node id
	uncertain map[string]string // unknown outcome: path → type
	// recent are the writes acknowledged while a node was being killed
	// (see verify).
	recent map[string]bool
}

func newProcModel() *procModel {
	return &procModel{types: map[string]string{}, homes: map[string]string{}, uncertain: map[string]string{}, recent: map[string]bool{}}
}

func (m *procModel) ack(p, typ, home string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.types[p], m.homes[p] = typ, home
	delete(m.uncertain, p)
}

// ackRecent records an acknowledged write made while a node was being
// killed.
func (m *procModel) ackRecent(p, typ, home string) {
	m.ack(p, typ, home)
	m.mu.Lock()
	m.recent[p] = true
	m.mu.Unlock()
}

// isRecent reports whether p was acknowledged while a node was being
// killed.
func (m *procModel) isRecent(p string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recent[p]
}

// settled forgets which writes were recent (once the cluster is whole
// again and they have been verified).
func (m *procModel) settled() {
	m.mu.Lock()
	clear(m.recent)
	m.mu.Unlock()
}

func (m *procModel) unsure(p, typ string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.uncertain[p] = typ
}

// paths returns the acknowledged paths, sorted.
func (m *procModel) paths() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	ps := make([]string, 0, len(m.types))
	for p := range m.types {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

// dirs returns the acknowledged directories, sorted.
func (m *procModel) dirs() []string {
	var ds []string
	for _, p := range m.paths() {
		if m.typ(p) == rpc.TypeDir {
			ds = append(ds, p)
		}
	}
	return ds
}

func (m *procModel) typ(p string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.types[p]
}

func (m *procModel) home(p string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.homes[p]
}

// children returns the names dir must list and the names it may list
// (unknown outcomes).
func (m *procModel) children(dir string) (must, may map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	must, may = map[string]bool{}, map[string]bool{}
	for p := range m.types {
		if p != "/" && path.Dir(p) == dir {
			must[path.Base(p)] = true
		}
	}
	for p := range m.uncertain {
		if path.Dir(p) == dir {
			may[path.Base(p)] = true
		}
	}
	return must, may
}

// homedOn counts the acknowledged paths homed on id.
func (m *procModel) homedOn(id string) []string {
	var out []string
	for _, p := range m.paths() {
		if m.home(p) == id {
			out = append(out, p)
		}
	}
	return out
}

// procUnavailable reports whether err is what the CLI maps to exit 5.
func procUnavailable(err error) bool {
	return errors.Is(err, rpc.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

// procErrs collects check failures from concurrent workers and reports a
// bounded number of them.
type procErrs struct {
	mu   sync.Mutex
	msgs []string
	n    int
}

func (e *procErrs) add(format string, a ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if len(e.msgs) < 25 {
		e.msgs = append(e.msgs, fmt.Sprintf(format, a...))
	}
}

// report fails t with the collected messages, if any.
func (e *procErrs) report(t testing.TB, what string) {
	t.Helper()
	if e.n > 0 {
		t.Errorf("%s: %d failure(s), first %d:\n  %s", what, e.n, len(e.msgs), strings.Join(e.msgs, "\n  "))
	}
}

// procParallel runs fn for every item with a few workers.
func procParallel(items []string, fn func(i int, item string)) {
	const workers = 4
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(items) {
					return
				}
				fn(i, items[i])
			}
		})
	}
	wg.Wait()
}

// populate creates a tree through random nodes of via: for each top name,
// a directory with sub subdirectories, files files directly under it and
// files files in each subdirectory. Every write must succeed; all are
// recorded in m.
func (c *procCluster) populate(m *procModel, via []*procNode, tops []string, sub, files int) {
	c.t.Helper()
	ctx := context.Background()
	var errs procErrs
	mkdirs := func(ps []string) {
		procParallel(ps, func(_ int, p string) {
			n := via[rand.IntN(len(via))]
			r, err := c.client(n).Mkdir(ctx, &rpc.MkdirRequest{Path: p, Mode: 0o755, UID: 1000, GID: 1000})
			if err != nil {
				errs.add("mkdir %s via %s: %v", p, n.id, err)
				m.unsure(p, rpc.TypeDir)
				return
			}
			m.ack(p, rpc.TypeDir, r.Inode.Home)
		})
	}
	var subs, files2 []string
	for _, top := range tops {
		for j := range sub {
			subs = append(subs, fmt.Sprintf("%s/s%d", top, j))
		}
		for k := range files {
			files2 = append(files2, fmt.Sprintf("%s/f%d", top, k))
		}
	}
	for _, s := range subs {
		for k := range files {
			files2 = append(files2, fmt.Sprintf("%s/f%d", s, k))
		}
	}
	mkdirs(tops)
	mkdirs(subs)
	procParallel(files2, func(_ int, p string) {
		n := via[rand.IntN(len(via))]
		r, err := c.client(n).Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o644, UID: 1000, GID: 1000})
		if err != nil {
			errs.add("create %s via %s: %v", p, n.id, err)
			m.unsure(p, rpc.TypeFile)
			return
		}
		m.ack(p, rpc.TypeFile, r.Inode.Home)
	})
	errs.report(c.t, "populate")
	if errs.n > 0 {
		c.t.FailNow()
	}
}

// rootedModel returns a new model holding "/" with its home.
func (c *procCluster) rootedModel() *procModel {
	c.t.Helper()
	m := newProcModel()
	c.recordRoot(m, c.nodes[0])
	return m
}

// procTops returns the top directories /<name>0 … /<name>(k−1).
func procTops(name string, k int) []string {
	tops := make([]string, k)
	for i := range tops {
		tops[i] = fmt.Sprintf("/%s%d", name, i)
	}
	return tops
}

// recordRoot adds "/" with its home to m.
func (c *procCluster) recordRoot(m *procModel, via *procNode) {
	c.t.Helper()
	st, err := c.client(via).Stat(context.Background(), "/")
	if err != nil {
		c.t.Fatalf("stat / via %s: %v", via.id, err)
	}
	m.ack("/", rpc.TypeDir, st.Home)
}

// verify checks every acknowledged path in m through the nodes of via
// (round robin): a path homed on a node in down must answer unavailable
// (never not found); every other path must exist with its type, except
// that a recent write (acknowledged around the kill) may also answer
// unavailable: a create whose parent and child have different homes is
// acknowledged at the parent's home's commit point, before the child's
// home has applied its part, and until it learns the outcome from the
// (now dead) parent's home the child's home cannot answer for it. Each
// directory's listing must hold exactly its acknowledged children, plus
// possibly children whose creation had an unknown outcome (an unavailable
// error for directories homed on a down node).
func (c *procCluster) verify(what string, m *procModel, via []*procNode, down map[string]bool) {
	c.t.Helper()
	ctx := context.Background()
	var errs procErrs
	var unavail, found, recentUnavail atomic.Int64
	procParallel(m.paths(), func(i int, p string) {
		n := via[i%len(via)]
		st, err := c.client(n).Stat(ctx, p)
		home := m.home(p)
		switch {
		case down[home]:
			if err == nil {
				errs.add("stat %s via %s: found (home %s) though its home %s is down", p, n.id, st.Home, home)
			} else if errors.Is(err, fs.ErrNotExist) || !procUnavailable(err) {
				errs.add("stat %s via %s (home %s is down): %v; want unavailable", p, n.id, home, err)
			} else {
				unavail.Add(1)
			}
		case err != nil && len(down) > 0 && m.isRecent(p) && procUnavailable(err) && !errors.Is(err, fs.ErrNotExist):
			recentUnavail.Add(1)
		case err != nil:
			errs.add("stat %s via %s (home %s): %v", p, n.id, home, err)
		case st.Type != m.typ(p):
			errs.add("stat %s via %s: type %q, want %q", p, n.id, st.Type, m.typ(p))
		default:
			found.Add(1)
		}
	})
	procParallel(m.dirs(), func(i int, d string) {
		n := via[i%len(via)]
		ents, err := c.client(n).ReadDirAll(ctx, d, 0)
		home := m.home(d)
		if down[home] {
			if err == nil || errors.Is(err, fs.ErrNotExist) || !procUnavailable(err) {
				errs.add("readdir %s via %s (home %s is down): %d entries, err %v; want unavailable", d, n.id, home, len(ents), err)
			}
			return
		}
		if err != nil {
			errs.add("readdir %s via %s (home %s): %v", d, n.id, home, err)
			return
		}
		must, may := m.children(d)
		got := map[string]bool{}
		for _, e := range ents {
			got[e.Name] = true
			if !must[e.Name] && !may[e.Name] {
				errs.add("readdir %s via %s: unexpected entry %q", d, n.id, e.Name)
			}
			if p := path.Join(d, e.Name); must[e.Name] && e.Type != m.typ(p) {
				errs.add("readdir %s via %s: %s has type %q, want %q", d, n.id, e.Name, e.Type, m.typ(p))
			}
		}
		for name := range must {
			if !got[name] {
				errs.add("readdir %s via %s: acknowledged entry %q missing", d, n.id, name)
			}
		}
	})
	c.t.Logf("%s: %d paths found, %d unavailable (home down), %d recent writes homed elsewhere unavailable, %d dirs listed",
		what, found.Load(), unavail.Load(), recentUnavail.Load(), len(m.dirs()))
	errs.report(c.t, what)
}

// resolveUncertain settles the writes with unknown outcome once the
// cluster is whole again: each such path must eventually answer found or
// not found (an interrupted creation is resolved, not left in limbo), and
// its parent's listing must agree. Found paths become acknowledged.
func (c *procCluster) resolveUncertain(m *procModel, via []*procNode) {
	c.t.Helper()
	m.mu.Lock()
	var ps []string
	for p := range m.uncertain {
		ps = append(ps, p)
	}
	m.mu.Unlock()
	sort.Strings(ps)
	ctx := context.Background()
	exists := 0
	for i, p := range ps {
		n := via[i%len(via)]
		var st *rpc.StatResponse
		var err error
		var first error
		tries := 0
		for deadline := time.Now().Add(procReadyTimeout); ; time.Sleep(procPollInterval) {
			st, err = c.client(n).Stat(ctx, p)
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				break
			}
			tries++
			if first == nil {
				first = err
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("unknown-outcome create %s: not resolved %v after the restart: %d stats via %s failed, the first with %v, the last with %v",
					p, procReadyTimeout, tries, n.id, first, err)
			}
		}
		ents, lerr := c.client(n).ReadDirAll(ctx, path.Dir(p), 0)
		if lerr != nil {
			c.t.Errorf("readdir %s via %s: %v", path.Dir(p), n.id, lerr)
			continue
		}
		listed := slices.ContainsFunc(ents, func(e rpc.DirEntry) bool { return e.Name == path.Base(p) })
		if listed != (err == nil) {
			c.t.Errorf("unknown-outcome create %s: stat says exists=%v (err %v), its parent lists it: %v", p, err == nil, err, listed)
		}
		m.mu.Lock()
		typ := m.uncertain[p]
		delete(m.uncertain, p)
		m.mu.Unlock()
		if err == nil {
			exists++
			if st.Type != typ {
				c.t.Errorf("stat %s: type %q, want %q", p, st.Type, typ)
			}
			m.ack(p, typ, st.Home)
		}
	}
	if len(ps) > 0 {
		c.t.Logf("%d writes with unknown outcome: %d were applied, %d were not", len(ps), exists, len(ps)-exists)
	}
}

// ---- TestProcessKillRestart ----

// TestProcessKillRestart: a 3-node cluster of agent processes, with
// single-copy homes (R=1) and replicated ones (R=3); kill -9 of a
// follower, then of the group's Raft leader (the bootstrap node unless
// the leader moved, in which case the bootstrap node is killed last too),
// each while writes are in flight. While the node is down, with R=1 its
// paths answer unavailable (CLI exit 5), never not found; with R=3 they
// answer again once the surviving replicas elected a leader; all other
// paths answer. After a restart with the same data directory every
// acknowledged write is there.
//
// With R=3 with each shard_log_store (the default wal, and boltdb): what a
// kill -9 leaves in the log is every acknowledged entry.
func TestProcessKillRestart(t *testing.T) {
	for _, tc := range []struct {
		r    int
		logs string
	}{{1, ""}, {3, ""}, {3, "boltdb"}} {
		name := fmt.Sprintf("R=%d", tc.r)
		if tc.logs != "" {
			name += "/" + tc.logs
		}
		t.Run(name, func(t *testing.T) { testProcessKillRestart(t, tc.r, tc.logs) })
	}
}

func testProcessKillRestart(t *testing.T, r int, logs string) {
	c := newProcClusterLogs(t, 3, r, logs)
	c.startAll()

	m := c.rootedModel()
	start := time.Now()
	c.populate(m, c.nodes, procTops("k", 6), 4, 8)
	t.Logf("created %d paths through random nodes in %v", len(m.paths()), time.Since(start).Round(time.Millisecond))
	for _, n := range c.nodes {
		t.Logf("%s homes %d of them", n.id, len(m.homedOn(n.id)))
	}
	c.verify("before any kill", m, c.nodes, nil)

	// Victims: a follower that is not the bootstrap node, then the leader,
	// then the bootstrap node if it was neither.
	leader := c.leader(c.nodes[0])
	var victims []*procNode
	for _, n := range c.nodes[1:] {
		if n != leader {
			victims = append(victims, n)
			break
		}
	}
	victims = append(victims, leader)
	if leader != c.nodes[0] {
		victims = append(victims, c.nodes[0])
	}
	for round, v := range victims {
		role := "follower"
		if v == leader {
			role = "leader"
		}
		if v.bootstrap {
			role += "+bootstrap"
		}
		ok := t.Run(fmt.Sprintf("kill-%s-%s", v.id, role), func(t *testing.T) {
			outer := c.t
			c.t = t
			defer func() { c.t = outer }()
			c.killRestartRound(m, v, round)
		})
		if !ok {
			break
		}
	}
}

// killRestartRound is one kill -9 / down checks / restart / verify round
// with v as the victim.
func (c *procCluster) killRestartRound(m *procModel, v *procNode, round int) {
	t := c.t
	var live []*procNode
	for _, n := range c.nodes {
		if n != v {
			live = append(live, n)
		}
	}
	down := map[string]bool{v.id: true}

	// The homes recorded from the create replies agree with "stat --json".
	for i, p := range procSample(m.homedOn(v.id), 6) {
		n := c.nodes[i%len(c.nodes)]
		out, errOut, code := c.at(n, "--json", "stat", p)
		var st map[string]any
		if code != 0 {
			t.Fatalf("ghba stat --json %s via %s: exit %d: %s", p, n.id, code, errOut)
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil || st["home"] != v.id || st["type"] != m.typ(p) {
			t.Fatalf("ghba stat --json %s via %s: %v %v; want home %s type %s", p, n.id, err, st, v.id, m.typ(p))
		}
	}

	// Writers create files in random acknowledged directories through
	// random nodes (the victim included) while the victim is killed.
	w := c.killUnderWriters(m, fmt.Sprintf("w%d", round), v)
	if late := w.homedOnVictimLate.Load(); late > 0 && c.replication == 1 {
		t.Errorf("%d files created after the kill were placed on the dead node %s", late, v.id)
	}

	onVictim := m.homedOn(v.id)
	if len(onVictim) == 0 {
		t.Fatalf("no acknowledged path is homed on %s: nothing to check", v.id)
	}
	if c.replication > 1 {
		// The shard named after the victim fails over to a surviving
		// replica: its paths answer, and new ones can be written.
		c.waitFailover(m, v, live)
		down = nil
		c.populate(m, live, []string{fmt.Sprintf("/failover%d", round)}, 1, 4)
	}
	// At once (R=1: before the cluster has noticed the death).
	c.verify("right after kill -9 of "+v.id, m, live, down)
	c.cliDownChecks(m, v, live, "right after the kill")

	// Once Serf has marked it failed.
	c.waitMarkedFailed(v, live)
	c.verify(v.id+" marked failed", m, live, down)
	c.cliDownChecks(m, v, live, "after it was marked failed")

	c.start(v)
	// From the moment members (the CLI, asked at the restarted node)
	// shows it alive, every path it homes answers OK through it, at once
	// and without a retry.
	if out, errOut, code := c.at(v, "members", "--wait", "3", "--timeout", procReadyTimeout.String()); code != 0 {
		t.Fatalf("members --wait 3 via restarted %s: exit %d: %s %s", v.id, code, out, errOut)
	}
	var notServed procErrs
	procParallel(onVictim, func(_ int, p string) {
		if _, err := c.client(v).Stat(context.Background(), p); err != nil {
			notServed.add("stat %s via %s once members showed it alive: %v", p, v.id, err)
		}
	})
	notServed.report(t, "paths of the restarted node once alive")
	c.waitReady(v.id+" restarted and the cluster whole", c.nodes...)
	c.resolveUncertain(m, c.nodes)
	c.verify("after the restart of "+v.id, m, c.nodes, nil)
	m.settled()
	// The restarted node answers for its own paths through the CLI.
	for _, p := range procSample(onVictim, 5) {
		out, errOut, code := c.at(v, "--json", "stat", p)
		if code != 0 {
			t.Errorf("stat %s via restarted %s: exit %d: %s", p, v.id, code, errOut)
			continue
		}
		var st rpc.StatResponse
		if err := json.Unmarshal([]byte(out), &st); err != nil || st.Type != m.typ(p) || st.Home != v.id {
			t.Errorf("stat --json %s via %s: %v %+v; want type %s home %s", p, v.id, err, st, m.typ(p), v.id)
		}
	}
}

// procWriters are 8 goroutines creating files in random acknowledged
// directories through random nodes of the cluster until stopped, around
// a fault: before it every write must succeed; after it a write may fail
// only as unavailable (never "not found"); every acknowledged write joins
// the model, every failed one is uncertain (resolveUncertain).
type procWriters struct {
	c      *procCluster
	stopCh chan struct{}
	wg     sync.WaitGroup
	errs   procErrs

	faulted, afterFault                                                atomic.Bool
	acked, attemptedAfter, ackedAfter, unavailAfter, homedOnVictimLate atomic.Int64
}

// killUnderWriters kills v while writers (names starting with prefix)
// create files in random acknowledged directories through random nodes,
// v included: 20 writes are acknowledged before the kill, 60 attempted
// after it; then the writers stop and report.
func (c *procCluster) killUnderWriters(m *procModel, prefix string, v *procNode) *procWriters {
	w := c.startWriters(m, prefix, v.id)
	defer w.stop()
	w.waitAcked(20)
	w.fault(func() { c.kill(v) })
	w.waitAttempted(60)
	w.stop()
	w.report(v.id)
	return w
}

// waitMarkedFailed waits until every node of live lists v as failed.
func (c *procCluster) waitMarkedFailed(v *procNode, live []*procNode) {
	c.t.Helper()
	c.waitFor(v.id+" marked failed", procReadyTimeout, func() { c.checkRunning(live...) }, func() (bool, string) {
		for _, n := range live {
			ms, err := c.members(n)
			if err != nil {
				return false, err.Error()
			}
			i := slices.IndexFunc(ms, func(x rpc.Member) bool { return x.ID == v.id })
			if i < 0 {
				return false, fmt.Sprintf("%s does not list %s: %+v", n.id, v.id, ms)
			}
			if ms[i].Status != "failed" {
				return false, fmt.Sprintf("%s sees %s as %q", n.id, v.id, ms[i].Status)
			}
		}
		return true, ""
	})
}

// startWriters starts the writers; names start with prefix, and creates
// homed on victim's shard after the fault are counted.
func (c *procCluster) startWriters(m *procModel, prefix, victim string) *procWriters {
	w := &procWriters{c: c, stopCh: make(chan struct{})}
	dirs := m.dirs()
	for g := range 8 {
		w.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-w.stopCh:
					return
				default:
				}
				n := c.nodes[rand.IntN(len(c.nodes))]
				p := path.Join(dirs[rand.IntN(len(dirs))], fmt.Sprintf("%s-%d-%d", prefix, g, i))
				after := w.afterFault.Load()
				ctx, cancel := context.WithTimeout(context.Background(), procRPCTimeout)
				r, err := c.client(n).Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o640, UID: 7, GID: 8})
				cancel()
				if after {
					w.attemptedAfter.Add(1)
				}
				if err == nil {
					m.ackRecent(p, rpc.TypeFile, r.Inode.Home)
					w.acked.Add(1)
					if after {
						w.ackedAfter.Add(1)
						if r.Inode.Home == victim {
							w.homedOnVictimLate.Add(1)
						}
					}
					continue
				}
				m.unsure(p, rpc.TypeFile)
				switch {
				case !w.faulted.Load():
					w.errs.add("create %s via %s before the fault: %v", p, n.id, err)
				case errors.Is(err, fs.ErrNotExist) || !procUnavailable(err):
					w.errs.add("create %s via %s after the fault on %s: %v; want success or unavailable", p, n.id, victim, err)
				default:
					w.unavailAfter.Add(1)
				}
			}
		})
	}
	return w
}

// waitAcked waits until k writes were acknowledged.
func (w *procWriters) waitAcked(k int64) {
	w.c.waitFor(fmt.Sprintf("%d writes acknowledged before the fault", k), procReadyTimeout, nil, func() (bool, string) {
		return w.acked.Load() >= k, fmt.Sprintf("%d acknowledged", w.acked.Load())
	})
}

// fault runs fn (a kill) while the writers run: failures are expected from
// just before it.
func (w *procWriters) fault(fn func()) {
	w.faulted.Store(true)
	fn()
	w.afterFault.Store(true)
}

// waitAttempted waits until k writes were attempted after the fault.
func (w *procWriters) waitAttempted(k int64) {
	w.c.waitFor(fmt.Sprintf("%d writes attempted after the fault", k), procReadyTimeout, nil, func() (bool, string) {
		return w.attemptedAfter.Load() >= k, fmt.Sprintf("%d attempted", w.attemptedAfter.Load())
	})
}

// stop stops the writers and waits for them (idempotent).
func (w *procWriters) stop() {
	select {
	case <-w.stopCh:
	default:
		close(w.stopCh)
	}
	w.wg.Wait()
}

// report logs the counts and reports the writers' errors.
func (w *procWriters) report(victim string) {
	w.c.t.Logf("writes around the fault on %s: %d acknowledged in all; after it %d attempted, %d acknowledged (%d homed on its shard), %d unavailable",
		victim, w.acked.Load(), w.attemptedAfter.Load(), w.ackedAfter.Load(), w.homedOnVictimLate.Load(), w.unavailAfter.Load())
	w.errs.report(w.c.t, "writes around the fault")
}

// procSample returns up to k items of ps spread over the slice, always
// including the first and the last.
func procSample(ps []string, k int) []string {
	if len(ps) <= k {
		return ps
	}
	out := make([]string, 0, k)
	for i := range k {
		out = append(out, ps[i*(len(ps)-1)/(k-1)])
	}
	return out
}

// cliDownChecks runs the CLI against the live nodes while v is down:
// stat of paths homed on v's shard exits 5 (unavailable), never 3, with
// R=1, and 0 with R>1 (after waitFailover); stat of paths homed elsewhere
// exits 0 with the right type.
func (c *procCluster) cliDownChecks(m *procModel, v *procNode, live []*procNode, when string) {
	t := c.t
	var onV, elsewhere []string
	for _, p := range m.paths() {
		switch {
		case m.home(p) == v.id:
			onV = append(onV, p)
		case !m.isRecent(p): // see verify
			elsewhere = append(elsewhere, p)
		}
	}
	var dirsOnV, filesOnV []string
	for _, p := range onV {
		if m.typ(p) == rpc.TypeDir {
			dirsOnV = append(dirsOnV, p)
		} else {
			filesOnV = append(filesOnV, p)
		}
	}
	check := append(procSample(filesOnV, 6), procSample(dirsOnV, 3)...)
	want := exitUnavail
	if c.replication > 1 {
		want = 0
	}
	for i, p := range check {
		n := live[i%len(live)]
		_, errOut, code := c.at(n, "stat", p)
		if code != want {
			t.Errorf("%s: ghba stat %s via %s (shard %s, its node down, R=%d): exit %d, want %d: %s",
				when, p, n.id, v.id, c.replication, code, want, strings.TrimSpace(errOut))
		}
	}
	for i, p := range procSample(elsewhere, 6) {
		n := live[i%len(live)]
		out, errOut, code := c.at(n, "--json", "stat", p)
		if code != 0 {
			t.Errorf("%s: ghba stat %s via %s (home %s is up): exit %d: %s", when, p, n.id, m.home(p), code, strings.TrimSpace(errOut))
			continue
		}
		var st rpc.StatResponse
		if err := json.Unmarshal([]byte(out), &st); err != nil || st.Type != m.typ(p) || st.Home != m.home(p) {
			t.Errorf("%s: stat --json %s via %s: %v %+v; want type %s home %s", when, p, n.id, err, st, m.typ(p), m.home(p))
		}
	}
	t.Logf("%s: CLI stat of %d paths of shard %s exit %d, of %d others exit 0", when, len(check), v.id, want, min(len(elsewhere), 6))
}

// ---- TestProcessJoinLeave ----

// TestProcessJoinLeave: a 4th node joins a 3-node cluster, appears in
// members and gets new files; then "ghba leave" on it moves its shard
// replicas to the others, it exits cleanly and is gone from the
// membership, and no path is lost.
// Then node2, which has homed files since the start, leaves the same way.
func TestProcessJoinLeave(t *testing.T) {
	c := newProcCluster(t, 3)
	c.startAll()
	m := c.rootedModel()
	c.populate(m, c.nodes, procTops("j", 3), 2, 6)
	t.Logf("created %d paths on 3 nodes", len(m.paths()))

	n4 := c.addNode()
	c.start(n4)
	c.waitReady("node4 joined", c.nodes...)
	// New directories and files through random nodes, node4 included:
	// balanced placement gives the empty node4 a share.
	c.populate(m, c.nodes, []string{"/n0", "/n1", "/n2"}, 2, 6)
	for _, n := range c.nodes {
		t.Logf("%s homes %d paths", n.id, len(m.homedOn(n.id)))
	}
	if got := len(m.homedOn(n4.id)); got == 0 {
		t.Fatalf("no new path was placed on the new node %s", n4.id)
	}
	c.verify("with node4", m, c.nodes, nil)

	remaining := slices.Clone(c.nodes)
	for _, leaver := range []*procNode{n4, c.nodes[1]} {
		ok := t.Run("leave-"+leaver.id, func(t *testing.T) {
			outer := c.t
			c.t = t
			defer func() { c.t = outer }()
			remaining = slices.DeleteFunc(remaining, func(n *procNode) bool { return n == leaver })
			c.leaveRound(m, leaver, remaining)
		})
		if !ok {
			break
		}
	}
}

// leaveRound runs "ghba leave" on leaver, checks that it handed over its
// shard, exited 0 and left the membership, and that every path is still
// there, in the same shard, through the remaining nodes.
func (c *procCluster) leaveRound(m *procModel, leaver *procNode, remaining []*procNode) {
	t := c.t
	homed := m.homedOn(leaver.id)
	if len(homed) == 0 {
		t.Fatalf("%s homes no path: the leave would drain nothing", leaver.id)
	}
	out, errOut, code := c.at(leaver, "--json", "leave", "--node-id", leaver.id, "--wait", "3m")
	if code != 0 {
		t.Fatalf("ghba leave on %s: exit %d: %s%s", leaver.id, code, out, errOut)
	}
	var lr rpc.LeaveResponse
	if err := json.Unmarshal([]byte(out), &lr); err != nil {
		t.Fatalf("leave --json: %v: %s", err, out)
	}
	t.Logf("%s left: %+v (it homed %d acknowledged paths)", leaver.id, lr, len(homed))
	if !slices.Contains(lr.HandedShards, leaver.id) {
		t.Errorf("%s left without handing over its shard %s: %+v", leaver.id, leaver.id, lr)
	}
	if err := c.waitExit(leaver, procStopTimeout); err != nil {
		t.Errorf("%s after leave: exit status %v, want 0", leaver.id, err)
	}
	c.waitFor(leaver.id+" gone from members and groups", procReadyTimeout, func() { c.checkRunning(remaining...) }, func() (bool, string) {
		for _, n := range remaining {
			ms, err := c.members(n)
			if err != nil {
				return false, err.Error()
			}
			if i := slices.IndexFunc(ms, func(x rpc.Member) bool { return x.ID == leaver.id }); i >= 0 && ms[i].Status != "left" {
				return false, fmt.Sprintf("%s sees %s as %q", n.id, leaver.id, ms[i].Status)
			}
			gs, err := c.groups(n)
			if err != nil {
				return false, err.Error()
			}
			for _, g := range gs {
				if slices.Contains(g.Members, leaver.id) {
					return false, fmt.Sprintf("%s: group %s still has %s: %+v", n.id, g.Group, leaver.id, g.Members)
				}
			}
		}
		return true, ""
	})
	c.waitReady("the remaining nodes ready", remaining...)

	// Every path is still found, on a remaining node, with the same type;
	// the listings are unchanged.
	ctx := context.Background()
	var errs procErrs
	procParallel(m.paths(), func(i int, p string) {
		n := remaining[i%len(remaining)]
		st, err := c.client(n).Stat(ctx, p)
		switch {
		case err != nil:
			errs.add("stat %s via %s (home before: %s): %v", p, n.id, m.home(p), err)
		case st.Type != m.typ(p):
			errs.add("stat %s: type %q, want %q", p, st.Type, m.typ(p))
		case st.Home != m.home(p):
			errs.add("stat %s: home shard %s, was %s (a shard keeps its paths)", p, st.Home, m.home(p))
		case st.HomeAddr == leaver.rpcAddr():
			errs.add("stat %s: shard %s still led by %s, which left", p, st.Home, leaver.id)
		default:
			m.ack(p, st.Type, st.Home)
		}
	})
	errs.report(t, "paths after "+leaver.id+" left")
	c.verify("after "+leaver.id+" left", m, remaining, nil)
	// The CLI too, for a few of the drained paths.
	for i, p := range procSample(homed, 4) {
		n := remaining[i%len(remaining)]
		if _, errOut, code := c.at(n, "stat", p); code != 0 {
			t.Errorf("ghba stat %s via %s after %s left: exit %d: %s", p, n.id, leaver.id, code, errOut)
		}
	}
}

// ---- TestProcessBadConfig ----

// TestProcessBadConfig: an agent with a bad config exits 2 at once with a
// message naming the key.
func TestProcessBadConfig(t *testing.T) {
	bin := procBinary(t)
	dir := t.TempDir()
	good := func(extra string) string {
		return fmt.Sprintf("node_id: bad1\ndata_dir: %s\nbind_addr: 127.0.0.1\nports: {rpc: 17410, raft: 17411, serf: 17412, http: 17413}\n%s",
			strconv.Quote(filepath.Join(dir, "data")), extra)
	}
	for _, tc := range []struct {
		name, yaml string
		env        []string
		key        string
	}{
		{"bad placement", good("placement: diagonal\n"), nil, "placement"},
		{"unknown key", good("max_grop_size: 7\n"), nil, "max_grop_size"},
		{"bad env override", good(""), []string{"GHBA_PORTS_RAFT=seventy"}, "ports.raft"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
			if err := os.WriteFile(cfg, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), procCLITimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "agent", "--config", cfg)
			cmd.Env = append(procEnv(), tc.env...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != exitUsage {
				t.Fatalf("agent with %s: %v, want exit %d:\n%s", tc.name, err, exitUsage, out.String())
			}
			if !strings.Contains(out.String(), tc.key) {
				t.Errorf("agent with %s: message does not name %q:\n%s", tc.name, tc.key, out.String())
			}
			if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
				t.Errorf("agent with %s created its data directory", tc.name)
			}
		})
	}
}

// ---- TestProcessGarbage ----

// TestProcessGarbage: raw TCP clients write garbage to a live node's RPC
// port (no preface, bad frames, a body that is not msgpack, truncated
// frames, idle and flooding connections) while a well-behaved client keeps
// working; the node does not crash and answers everyone else correctly.
func TestProcessGarbage(t *testing.T) {
	c := newProcCluster(t, 1)
	n := c.nodes[0]
	c.start(n)
	c.waitReady("1 node ready", n)
	addr := n.rpcAddr()

	// The well-behaved client: creates and stats until told to stop.
	stop := make(chan struct{})
	var good sync.WaitGroup
	var goodOps atomic.Int64
	var goodErrs procErrs
	cl := client.New(client.Options{Addrs: []string{addr}, Timeout: procRPCTimeout})
	defer cl.Close()
	if _, err := cl.Mkdir(context.Background(), &rpc.MkdirRequest{Path: "/g", Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	good.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p := fmt.Sprintf("/g/f%d", i)
			if _, err := cl.Create(context.Background(), &rpc.CreateRequest{Path: p, Mode: 0o644}); err != nil {
				goodErrs.add("create %s: %v", p, err)
				continue
			}
			if st, err := cl.Stat(context.Background(), p); err != nil || st.Type != rpc.TypeFile {
				goodErrs.add("stat %s: %v", p, err)
			}
			goodOps.Add(1)
		}
	})

	frame := func(payload []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
		return append(b, payload...)
	}
	request := func(seq uint64, method string, body []byte) []byte {
		p := []byte{1}
		p = binary.BigEndian.AppendUint64(p, seq)
		p = binary.BigEndian.AppendUint64(p, uint64(5*time.Second))
		p = append(p, byte(len(method)))
		p = append(p, method...)
		return frame(append(p, body...))
	}
	rnd := make([]byte, 64<<10)
	for i := range rnd {
		rnd[i] = byte(rand.UintN(256))
	}
	const preface = "GHB\x01"
	cases := []struct {
		name string
		data []byte
		hold bool // keep the connection open afterwards
	}{
		{"random bytes", rnd, false},
		{"http request", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), false},
		{"bad preface version", []byte("GHB\x09" + string(frame([]byte{1, 2, 3}))), false},
		{"preface then random", append([]byte(preface), rnd[:4096]...), false},
		{"zero-length frame", append([]byte(preface), frame(nil)...), false},
		{"huge frame length", append([]byte(preface), 0xff, 0xff, 0xff, 0xff, 1, 2, 3), false},
		{"unknown frame kind", append([]byte(preface), frame([]byte{0x77, 1, 2, 3, 4})...), false},
		{"short request header", append([]byte(preface), frame([]byte{1, 0, 0})...), false},
		{"method longer than frame", append([]byte(preface), frame([]byte{1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 200, 'N'})...), false},
		{"garbage body", append([]byte(preface), request(1, rpc.MethodStat, rnd[:300])...), false},
		{"garbage body create", append([]byte(preface), request(1, rpc.MethodCreate, []byte{0xde, 0xad, 0xbe, 0xef})...), false},
		{"wrong msgpack type", append([]byte(preface), request(1, rpc.MethodMkdir, []byte{0x93, 1, 2, 3})...), false},
		{"unknown method", append([]byte(preface), request(1, "No.Such", nil)...), false},
		{"server-only method with junk", append([]byte(preface), request(1, "Txn.CommitChild", rnd[:64])...), false},
		{"duplicate seq", append(append([]byte(preface), request(7, rpc.MethodPing, nil)...), request(7, rpc.MethodPing, nil)...), false},
		{"response frame from client", append([]byte(preface), frame([]byte{2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0})...), false},
		{"truncated frame, held open", append([]byte(preface), 0, 0, 1, 0, 1, 2, 3), true},
		{"preface only, held open", []byte(preface), true},
		{"half a preface, held open", []byte("GH"), true},
	}
	var (
		heldMu sync.Mutex
		held   []net.Conn
	)
	defer func() {
		for _, h := range held {
			h.Close()
		}
	}()
	var sendErrs procErrs
	send := func(name string, data []byte, hold bool) {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			sendErrs.add("%s: dial: %v", name, err)
			return
		}
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		// The server may close the connection at the first bad byte: a
		// write error is fine.
		_, _ = conn.Write(data)
		if hold {
			heldMu.Lock()
			held = append(held, conn)
			heldMu.Unlock()
			return
		}
		// Read whatever the server answers until it closes or goes quiet.
		_, _ = bufio.NewReader(conn).Discard(1 << 20)
		conn.Close()
	}
	for round := range 3 {
		var wg sync.WaitGroup
		for _, tc := range cases {
			wg.Go(func() { send(tc.name, tc.data, tc.hold && round == 0) })
		}
		wg.Wait()
		sendErrs.report(t, "garbage connections")
		c.checkRunning(n)
	}
	// A burst of concurrent garbage connections.
	var burst sync.WaitGroup
	for i := range 40 {
		burst.Go(func() {
			conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
			_, _ = conn.Write(append([]byte(preface), rnd[i*100:i*100+1000]...))
			_, _ = bufio.NewReader(conn).Discard(1 << 20)
		})
	}
	burst.Wait()

	// The well-behaved client made progress during and after the garbage.
	before := goodOps.Load()
	c.waitFor("the good client progresses after the garbage", procReadyTimeout, func() { c.checkRunning(n) }, func() (bool, string) {
		return goodOps.Load() >= before+20, fmt.Sprintf("%d ops", goodOps.Load()-before)
	})
	close(stop)
	good.Wait()
	goodErrs.report(t, "the well-behaved client")
	t.Logf("the well-behaved client did %d create+stat pairs", goodOps.Load())
	c.checkRunning(n)
	// A fresh CLI process is served too, while the held connections are
	// still open.
	if _, errOut, code := c.at(n, "stat", "/g/f0"); code != 0 {
		t.Errorf("ghba stat /g/f0 after the garbage: exit %d: %s", code, errOut)
	}
	out, errOut, code := c.at(n, "--json", "ls", "/g")
	if code != 0 {
		t.Fatalf("ghba ls /g: exit %d: %s", code, errOut)
	}
	var ents []dirEntryJSON
	if err := json.Unmarshal([]byte(out), &ents); err != nil || int64(len(ents)) < goodOps.Load() {
		t.Errorf("ls --json /g: %v, %d entries, want at least %d", err, len(ents), goodOps.Load())
	}
}
