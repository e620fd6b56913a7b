package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ghba/ghba/node"
)

// clearEnv blanks every GHBA_* variable for the test (viper ignores empty
// values), so the caller's environment cannot change the results.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, envPrefix+"_") {
			t.Setenv(k, "")
		}
	}
}

// checkConfig runs "ghba agent --check args..." and returns the printed
// configuration, or the exit code and stderr on failure.
func checkConfig(t *testing.T, args ...string) (cfg map[string]any, code int, stderr string) {
	t.Helper()
	out, errOut, code := runCLI(t, append([]string{"agent", "--check"}, args...)...)
	if code != 0 {
		return nil, code, errOut
	}
	if err := json.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatalf("--check output is not JSON: %v\n%s", err, out)
	}
	return cfg, 0, errOut
}

func port(cfg map[string]any, name string) any {
	return cfg["ports"].(map[string]any)[name]
}

const node1 = "../../testdata/node1.yaml"

func TestConfigGoodFiles(t *testing.T) {
	clearEnv(t)
	rpcPorts := map[string]bool{}
	for i, name := range []string{"node1", "node2", "node3"} {
		cfg, code, errOut := checkConfig(t, "--config", "../../testdata/"+name+".yaml")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, errOut)
		}
		if cfg["node_id"] != name {
			t.Errorf("%s: node_id = %v", name, cfg["node_id"])
		}
		if dd := cfg["data_dir"].(string); !filepath.IsAbs(dd) || !strings.HasSuffix(dd, filepath.Join("data", name)) {
			t.Errorf("%s: data_dir = %q, want an absolute path ending in data/%s", name, dd, name)
		}
		if (cfg["bootstrap"] == true) != (i == 0) {
			t.Errorf("%s: bootstrap = %v", name, cfg["bootstrap"])
		}
		rj, _ := cfg["retry_join"].([]any)
		if i > 0 && (len(rj) != 1 || rj[0] != "127.0.0.1:7412") {
			t.Errorf("%s: retry_join = %v, want node1's serf address", name, cfg["retry_join"])
		}
		p := port(cfg, "rpc").(float64)
		rpcPorts[name] = true
		if p != float64(7400+10*(i+1)) {
			t.Errorf("%s: ports.rpc = %v", name, p)
		}
		// Defaults fill keys the file does not set.
		if cfg["propagate_interval"] != "2s" || cfg["filter_capacity"] != float64(node.DefaultConfig().FilterCapacity) {
			t.Errorf("%s: defaults not applied: %v", name, cfg)
		}
	}
}

func TestConfigPrecedence(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	t.Setenv("GHBA_NODE_ID", "from-env")
	t.Setenv("GHBA_PORTS_RPC", "9410")
	t.Setenv("GHBA_DATA_DIR", dir)
	t.Setenv("GHBA_RETRY_JOIN", "10.0.0.1:7402,10.0.0.2:7402")
	t.Setenv("GHBA_BITS_PER_FILE", "12.5")
	t.Setenv("GHBA_PROPAGATE_INTERVAL", "500ms")
	t.Setenv("GHBA_BOOTSTRAP", "false")

	cfg, code, errOut := checkConfig(t, "--config", node1)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := map[string]any{
		"node_id": "from-env", "data_dir": dir, "bits_per_file": 12.5,
		"propagate_interval": "500ms", "bootstrap": false,
	}
	for k, v := range want {
		if cfg[k] != v {
			t.Errorf("env: %s = %v, want %v", k, cfg[k], v)
		}
	}
	if port(cfg, "rpc") != float64(9410) || port(cfg, "raft") != float64(7411) {
		t.Errorf("env: ports = %v", cfg["ports"])
	}
	if rj := cfg["retry_join"].([]any); len(rj) != 2 || rj[1] != "10.0.0.2:7402" {
		t.Errorf("env: retry_join = %v", rj)
	}

	// Flags win over the environment and the file.
	cfg, code, errOut = checkConfig(t, "--config", node1, "--node-id", "from-flag", "--rpc-port", "9999",
		"--retry-join", "127.0.0.1:1", "--retry-join", "127.0.0.1:2", "--log-level", "debug", "--log-format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if cfg["node_id"] != "from-flag" || port(cfg, "rpc") != float64(9999) || cfg["log_level"] != "debug" || cfg["log_format"] != "json" {
		t.Errorf("flags: %v", cfg)
	}
	if rj := cfg["retry_join"].([]any); len(rj) != 2 || rj[0] != "127.0.0.1:1" {
		t.Errorf("flags: retry_join = %v", rj)
	}
	// A flag left at its default does not override the file.
	if cfg["group"] != "g1" || cfg["bind_addr"] != "127.0.0.1" { // (the flags' defaults: auto, 127.0.0.1)
		t.Errorf("flags: untouched keys changed: %v", cfg)
	}
}

func TestConfigWithoutFile(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	t.Setenv("GHBA_NODE_ID", "solo")
	cfg, code, errOut := checkConfig(t, "--data-dir", dir, "--group", "g7")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if cfg["node_id"] != "solo" || cfg["group"] != "g7" || port(cfg, "rpc") != float64(7400) || cfg["max_group_size"] != float64(7) {
		t.Errorf("config = %v", cfg)
	}
	cfg, code, errOut = checkConfig(t, "--data-dir", dir, "--group", "auto", "--max-group-size", "auto")
	if code != 0 || cfg["max_group_size"] != "auto" {
		t.Errorf("--max-group-size auto: exit %d, config %v: %s", code, cfg, errOut)
	}
}

func TestConfigBadFiles(t *testing.T) {
	clearEnv(t)
	tests := []struct {
		file string
		want []string // substrings of the message
	}{
		{"bad-unknown-key.yaml", []string{`unknown key "bits_per_fille"`}},
		{"bad-unknown-nested-key.yaml", []string{`unknown key "ports.grpc"`}},
		{"bad-type.yaml", []string{"bits_per_file", `"eight"`}},
		{"bad-port.yaml", []string{"ports.rpc", "70000"}},
		{"bad-placement.yaml", []string{"placement", "nearest"}},
		{"bad-syntax.yaml", []string{"bad-syntax.yaml", "yaml"}},
		{"does-not-exist.yaml", []string{"does-not-exist.yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			_, code, errOut := checkConfig(t, "--config", filepath.Join("../../testdata", tt.file))
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			for _, w := range tt.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("message %q lacks %q", errOut, w)
				}
			}
		})
	}
}

// goodConfig is a valid configuration as a map (written as JSON, which is
// YAML).
func goodConfig(dir string) map[string]any {
	return map[string]any{
		"node_id": "n1", "data_dir": dir, "bind_addr": "127.0.0.1",
		"ports":     map[string]any{"rpc": 7410, "raft": 7411, "serf": 7412, "http": 7413},
		"bootstrap": true, "group": "g1", "retry_join": []string{"127.0.0.1:7422"},
	}
}

func writeConfig(t *testing.T, cfg map[string]any) string {
	t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestConfigBadValues(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	ports := func(kv ...any) map[string]any {
		p := map[string]any{"rpc": 7410, "raft": 7411, "serf": 7412, "http": 7413}
		for i := 0; i < len(kv); i += 2 {
			p[kv[i].(string)] = kv[i+1]
		}
		return p
	}
	tests := []struct {
		name string
		set  map[string]any
		key  string // the message must name it
	}{
		// Unknown keys and type errors.
		{"unknown top-level", map[string]any{"nodeid": "x"}, `"nodeid"`},
		{"unknown map", map[string]any{"vault": map[string]any{"enabled": true}}, `"vault"`},
		{"unknown key of a known map", map[string]any{"tls": map[string]any{"cert": "x"}}, `"tls.cert"`},
		{"limit zero", map[string]any{"limits": map[string]any{"max_conns": 0}}, "max_conns"},
		{"per-connection limit over the node's", map[string]any{"limits": map[string]any{"max_concurrent": 8, "max_concurrent_per_conn": 9}}, "max_concurrent_per_conn"},
		{"acl policy", map[string]any{"acl": map[string]any{"enabled": true, "default_policy": "maybe"}}, "default_policy"},
		{"acl short server token", map[string]any{"acl": map[string]any{"server_token": "short"}}, "server_token"},
		{"unknown nested", map[string]any{"ports": ports("admin", 1)}, `"ports.admin"`},
		{"ports not a map", map[string]any{"ports": 7410}, "ports"},
		{"port not a number", map[string]any{"ports": ports("raft", "x")}, "ports.raft"},
		{"bits_per_file word", map[string]any{"bits_per_file": "eight"}, "bits_per_file"},
		{"bootstrap word", map[string]any{"bootstrap": "maybe"}, "bootstrap"},
		{"max_group_size word", map[string]any{"max_group_size": "seven"}, "max_group_size"},
		{"propagate_interval word", map[string]any{"propagate_interval": "soon"}, "propagate_interval"},
		{"retry_join map", map[string]any{"retry_join": map[string]any{"a": "b"}}, "retry_join"},
		{"max_group_size fraction", map[string]any{"max_group_size": 7.5}, "max_group_size"},
		{"propagate_interval bare number", map[string]any{"propagate_interval": 5}, "propagate_interval"},
		{"bootstrap number", map[string]any{"bootstrap": 1}, "bootstrap"},
		{"node_id list", map[string]any{"node_id": []string{"a", "b"}}, "node_id"},
		// node.Config.Validate, one case per key.
		{"node_id empty", map[string]any{"node_id": ""}, "node_id"},
		{"node_id chars", map[string]any{"node_id": "bad id!"}, "node_id"},
		{"data_dir", map[string]any{"data_dir": ""}, "data_dir"},
		{"bind_addr", map[string]any{"bind_addr": "localhost"}, "bind_addr"},
		{"advertise_addr", map[string]any{"advertise_addr": "0.0.0.0"}, "advertise_addr"},
		{"advertise_addr needed", map[string]any{"bind_addr": "0.0.0.0"}, "advertise_addr"},
		{"ports.rpc zero", map[string]any{"ports": ports("rpc", 0)}, "ports.rpc"},
		{"ports.raft range", map[string]any{"ports": ports("raft", 65536)}, "ports.raft"},
		{"ports.serf duplicate", map[string]any{"ports": ports("serf", 7410)}, "ports.serf"},
		{"ports.http negative", map[string]any{"ports": ports("http", -1)}, "ports.http"},
		{"group", map[string]any{"group": "no spaces allowed"}, "group"},
		{"retry_join", map[string]any{"retry_join": []string{"127.0.0.1"}}, "retry_join"},
		{"max_group_size", map[string]any{"max_group_size": 0}, "max_group_size"},
		{"max_group_size over the cap", map[string]any{"max_group_size": 65}, "max_group_size"},
		{"max_group_size auto of a fixed group", map[string]any{"max_group_size": "auto", "group": "g1"}, "max_group_size"},
		{"bits_per_file", map[string]any{"bits_per_file": 0.5}, "bits_per_file"},
		{"filter_capacity", map[string]any{"filter_capacity": 0}, "filter_capacity"},
		{"lru_entries", map[string]any{"lru_entries": -1}, "lru_entries"},
		{"lru_bits_per_file", map[string]any{"lru_bits_per_file": 100}, "lru_bits_per_file"},
		{"propagate_threshold", map[string]any{"propagate_threshold": 0}, "propagate_threshold"},
		{"propagate_interval", map[string]any{"propagate_interval": "-1s"}, "propagate_interval"},
		{"placement", map[string]any{"placement": "nearest"}, "placement"},
		{"data_gc_grace zero", map[string]any{"data_gc_grace": "0s"}, "data_gc_grace"},
		{"data_gc_grace too long", map[string]any{"data_gc_grace": "10000h"}, "data_gc_grace"},
		{"shard_log_store", map[string]any{"shard_log_store": "rocksdb"}, "shard_log_store"},
		{"log_level", map[string]any{"log_level": "loud"}, "log_level"},
		{"log_format", map[string]any{"log_format": "xml"}, "log_format"},
		{"tls without ca_file", map[string]any{"tls": map[string]any{"cert_file": "a.pem", "key_file": "a-key.pem"}}, "tls"},
		{"tls cert without key", map[string]any{"tls": map[string]any{"ca_file": "ca.pem", "cert_file": "a.pem"}}, "tls"},
		{"tls without a certificate", map[string]any{"tls": map[string]any{"ca_file": "ca.pem"}}, "tls"},
		{"encrypt not base64", map[string]any{"encrypt": "not base64!"}, "encrypt"},
		{"encrypt length", map[string]any{"encrypt": "AAAA"}, "encrypt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := goodConfig(dir)
			maps.Copy(cfg, tt.set)
			_, code, errOut := checkConfig(t, "--config", writeConfig(t, cfg))
			if code != exitUsage {
				t.Errorf("exit %d, want %d (stderr %q)", code, exitUsage, errOut)
			}
			if !strings.Contains(errOut, tt.key) {
				t.Errorf("message %q does not name %s", errOut, tt.key)
			}
		})
	}
	// The base configuration itself is fine.
	if _, code, errOut := checkConfig(t, "--config", writeConfig(t, goodConfig(dir))); code != 0 {
		t.Fatalf("good config refused: %s", errOut)
	}
}

// TestConfigRedactsSecrets: --check shows that a gossip key and a server
// token are set, never their values.
func TestConfigRedactsSecrets(t *testing.T) {
	clearEnv(t)
	const key = "cg8StVXbQJ0gPvMd9o7yrg1r1FUH69kyKPvNCr3fCZM="
	cfg := goodConfig(t.TempDir())
	const serverToken = "s3rv3r-t0k3n-n0t-t0-b3-pr1nt3d"
	cfg["encrypt"] = key
	cfg["acl"] = map[string]any{"enabled": true, "server_token": serverToken}
	got, code, errOut := checkConfig(t, "--config", writeConfig(t, cfg))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if got["encrypt"] != "(redacted)" {
		t.Errorf("encrypt shown as %v", got["encrypt"])
	}
	if a, _ := got["acl"].(map[string]any); a["server_token"] != "(redacted)" || a["enabled"] != true {
		t.Errorf("acl shown as %v", got["acl"])
	}
	if b, _ := json.Marshal(got); strings.Contains(string(b), key) || strings.Contains(string(b), serverToken) {
		t.Errorf("--check prints a secret: %s", b)
	}
}

func TestConfigBadEnvAndFlags(t *testing.T) {
	clearEnv(t)
	t.Run("env", func(t *testing.T) {
		t.Setenv("GHBA_PORTS_SERF", "serf")
		_, code, errOut := checkConfig(t, "--config", node1)
		if code != exitUsage || !strings.Contains(errOut, "ports.serf") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})
	t.Run("flag", func(t *testing.T) {
		_, code, errOut := checkConfig(t, "--config", node1, "--placement", "nearest")
		if code != exitUsage || !strings.Contains(errOut, "placement") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})
	t.Run("flag type", func(t *testing.T) {
		_, code, errOut := checkConfig(t, "--config", node1, "--rpc-port", "x")
		if code != exitUsage || !strings.Contains(errOut, "rpc-port") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})
}

// TestConfigKeysMatchNodeConfig guards the key list against node.Config
// growing a field: every mapstructure key must be settable from the
// environment (viper needs a default for it).
func TestConfigKeysMatchNodeConfig(t *testing.T) {
	clearEnv(t)
	keys := map[string]bool{}
	for _, k := range configKeys() {
		keys[k.name] = true
	}
	for _, want := range []string{"node_id", "data_dir", "bind_addr", "advertise_addr", "ports.rpc", "ports.raft",
		"ports.serf", "ports.http", "group", "bootstrap", "retry_join", "max_group_size", "bits_per_file",
		"lru_entries", "lru_bits_per_file", "propagate_threshold", "placement", "shard_log_store", "log_level", "log_format"} {
		if !keys[want] {
			t.Errorf("config key %q missing (have %v)", want, keys)
		}
	}
	for _, f := range agentFlags {
		if !keys[f.key] {
			t.Errorf("flag --%s bound to unknown key %q", f.flag, f.key)
		}
	}
}

// fakeNode records the agent's calls.
type fakeNode struct {
	cfg                 node.Config
	mu                  sync.Mutex
	started, shutdown   int
	startErr            error
	startedCh           chan struct{}
	shutdownHadDeadline bool
	left                chan struct{} // nil: never
	fatal               error         // what Err reports once left is closed
}

func (n *fakeNode) Done() <-chan struct{} { return n.left }

func (n *fakeNode) Err() error { return n.fatal }

func (n *fakeNode) ReloadTLS() error { return nil }

func (n *fakeNode) Start(ctx context.Context) error {
	n.mu.Lock()
	n.started++
	n.mu.Unlock()
	close(n.startedCh)
	return n.startErr
}

func (n *fakeNode) Shutdown(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.shutdown++
	_, n.shutdownHadDeadline = ctx.Deadline()
	return nil
}

// Stop is the graceful stop (SIGTERM); the fake counts it as a shutdown.
func (n *fakeNode) Stop(ctx context.Context) error { return n.Shutdown(ctx) }

func useFakeNode(t *testing.T, startErr error) *fakeNode {
	t.Helper()
	fn := &fakeNode{startErr: startErr, startedCh: make(chan struct{})}
	old := newAgentNode
	newAgentNode = func(cfg node.Config, logger *slog.Logger) (agentNode, error) {
		fn.cfg = cfg
		logger.With("node_id", cfg.NodeID).Info("node created") // as node.New does
		return fn, nil
	}
	t.Cleanup(func() { newAgentNode = old })
	return fn
}

func TestAgentRunsAndShutsDown(t *testing.T) {
	clearEnv(t)
	fn := useFakeNode(t, nil)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var errOut strings.Builder
	done := make(chan error, 1)
	go func() {
		root := newRootCmd()
		root.SetOut(new(strings.Builder))
		root.SetErr(&errOut)
		root.SetArgs([]string{"agent", "--config", node1, "--data-dir", dir, "--log-format", "json"})
		done <- root.ExecuteContext(ctx)
	}()
	select {
	case <-fn.startedCh:
	case <-time.After(10 * time.Second):
		t.Fatal("node not started")
	}
	cancel() // what SIGINT/SIGTERM do through main's NotifyContext
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not return after cancel")
	}
	fn.mu.Lock()
	defer fn.mu.Unlock()
	if fn.started != 1 || fn.shutdown != 1 || !fn.shutdownHadDeadline {
		t.Errorf("started %d, shutdown %d (deadline %v)", fn.started, fn.shutdown, fn.shutdownHadDeadline)
	}
	if fn.cfg.NodeID != "node1" || fn.cfg.DataDir != dir || fn.cfg.Ports.RPC != 7410 {
		t.Errorf("node got config %+v", fn.cfg)
	}
	lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
	if len(lines) < 3 {
		t.Fatalf("too few log lines:\n%s", errOut.String())
	}
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", l)
		}
		if rec["node_id"] != "node1" || strings.Count(l, `"node_id"`) != 1 {
			t.Errorf("log line without exactly one node_id: %q", l)
		}
	}
}

func TestAgentStartFailure(t *testing.T) {
	clearEnv(t)
	boom := errors.New("port in use")
	fn := useFakeNode(t, boom)
	_, errOut, code := runCLI(t, "agent", "--config", node1, "--data-dir", t.TempDir())
	if code != exitError || !strings.Contains(errOut, "port in use") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	fn.mu.Lock()
	defer fn.mu.Unlock()
	if fn.shutdown != 0 {
		t.Errorf("shutdown called %d times after a failed start (Start cleans up itself)", fn.shutdown)
	}
}

func TestAgentStopsWhenNodeLeft(t *testing.T) {
	clearEnv(t)
	fn := useFakeNode(t, nil)
	fn.left = make(chan struct{})
	close(fn.left)
	_, errOut, code := runCLI(t, "agent", "--config", node1, "--data-dir", t.TempDir())
	if code != 0 || !strings.Contains(errOut, "left the cluster") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	fn.mu.Lock()
	defer fn.mu.Unlock()
	if fn.shutdown != 1 {
		t.Errorf("shutdown called %d times, want 1", fn.shutdown)
	}
}

// TestAgentExitsOnFatalError: a node that stops on a fatal error (its
// group's log holds a command this build does not know) makes the agent
// shut it down and exit with an error that names the cause.
func TestAgentExitsOnFatalError(t *testing.T) {
	clearEnv(t)
	fn := useFakeNode(t, nil)
	fn.left = make(chan struct{})
	fn.fatal = errors.New("group log holds an unknown command")
	close(fn.left)
	_, errOut, code := runCLI(t, "agent", "--config", node1, "--data-dir", t.TempDir())
	if code != exitError || !strings.Contains(errOut, "unknown command") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	fn.mu.Lock()
	defer fn.mu.Unlock()
	if fn.shutdown != 1 {
		t.Errorf("shutdown called %d times, want 1", fn.shutdown)
	}
}

func TestAgentLogLevel(t *testing.T) {
	var b strings.Builder
	cfg := defaultAgentConfig()
	cfg.NodeID, cfg.LogLevel = "n9", "warn"
	l := newLogger(&b, cfg)
	l.Info("hidden")
	l.Warn("shown")
	out := b.String()
	if strings.Contains(out, "hidden") || !strings.Contains(out, "level=WARN msg=shown") {
		t.Errorf("text log at warn: %q", out)
	}
}
