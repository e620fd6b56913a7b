package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// requireDockerEnv set to 1 makes a missing docker CLI, daemon or
// docker-compose a failure instead of a skip (CI sets it).
const requireDockerEnv = "GHBA_REQUIRE_DOCKER"

// buildBudget bounds building the binary and the image: a static build
// with -trimpath shares no compiled package with the test binaries, so
// on a fresh CI machine it compiles every dependency, beside the rest of
// the test run on 2 cores (4 minutes were not enough there once);
// composeBudget bounds starting the cluster and using it.
const (
	buildBudget   = 12 * time.Minute
	composeBudget = 100 * time.Second
)

// TestCompose builds the image from this tree (deploy/Dockerfile, as make
// image does), starts deploy/compose.yaml under a project name of its own
// with its own subnet and published ports, waits until the three nodes
// serve (their health checks and /v1/health), creates and stats a file
// with the CLI built from the tree through the published RPC ports, and
// removes the cluster and its volumes.
func TestCompose(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the compose cluster test needs docker")
	}
	requireDocker(t)
	bctx, cancel := context.WithTimeout(t.Context(), buildBudget)
	defer cancel()

	modRoot, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	build := exec.CommandContext(bctx, "go", "build", "-tags", "hashicorpmetrics", "-trimpath",
		"-o", filepath.Join(bin, "ghba"), "./cmd/ghba")
	build.Dir = modRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ghba := filepath.Join(bin, "ghba")

	id := fmt.Sprintf("%d%04x", os.Getpid(), rand.IntN(1<<16))
	project := "ghbadeploy" + id
	image := "ghba-deploy-test:" + id
	run(bctx, t, nil, "docker", "build", "-q", "-f", filepath.Join(modRoot, "deploy", "Dockerfile"),
		"-t", image, "--label", "ghba.deploy-test="+project, bin)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(cctx, "docker", "rmi", "-f", image).CombinedOutput(); err != nil {
			t.Logf("docker rmi %s: %v: %s", image, err, out)
		}
	})

	ctx, cancel := context.WithTimeout(t.Context(), composeBudget)
	defer cancel()
	ports := freePorts(t, 6)
	env := []string{"GHBA_IMAGE=" + image}
	for i := range 3 {
		env = append(env,
			fmt.Sprintf("GHBA_NODE%d_RPC_PORT=%d", i+1, ports[2*i]),
			fmt.Sprintf("GHBA_NODE%d_HTTP_PORT=%d", i+1, ports[2*i+1]))
	}
	compose := func(ctx context.Context, subnet string, args ...string) (string, error) {
		full := append([]string{"-f", filepath.Join(modRoot, "deploy", "compose.yaml"), "-p", project}, args...)
		return output(ctx, append(env, "GHBA_SUBNET="+subnet), "docker-compose", full...)
	}
	// A /24 that no network of this engine uses: docker refuses an
	// overlapping one, so try a few (the fault suite takes 10.200-249).
	var subnet string
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if t.Failed() {
			logs, _ := compose(cctx, subnet, "logs", "--no-color", "--tail", "40")
			t.Logf("compose logs:\n%s", logs)
		}
		if out, err := compose(cctx, subnet, "down", "-v", "--timeout", "30"); err != nil {
			t.Errorf("docker-compose down -v: %v\n%s", err, out)
		}
	})
	for attempt := 0; ; attempt++ {
		subnet = fmt.Sprintf("10.%d.%d", 150+rand.IntN(50), rand.IntN(256))
		out, err := compose(ctx, subnet, "up", "-d")
		if err == nil {
			break
		}
		if attempt < 4 && strings.Contains(out, "overlap") {
			t.Logf("subnet %s.0/24 taken: %v", subnet, err)
			if out, err := compose(ctx, subnet, "down", "-v"); err != nil {
				t.Logf("docker-compose down -v: %v\n%s", err, out)
			}
			continue
		}
		t.Fatalf("docker-compose up -d: %v\n%s", err, out)
	}

	addrs := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", ports[0], ports[2], ports[4])
	cli := func(args ...string) string {
		t.Helper()
		return run(ctx, t, nil, ghba, append([]string{"--addr", addrs}, args...)...)
	}
	cli("members", "--wait", "3", "--timeout", "60s")
	for i := range 3 {
		waitHealthy(ctx, t, fmt.Sprintf("127.0.0.1:%d", ports[2*i+1]))
	}
	waitContainersHealthy(ctx, t, func(ctx context.Context) (string, error) { return compose(ctx, subnet, "ps") })

	cli("mkdir", "-p", "/deploy")
	cli("create", "/deploy/compose-test")
	var st struct {
		Path string `json:"path"`
		Type string `json:"type"`
		Home string `json:"home"`
	}
	if err := json.Unmarshal([]byte(cli("--json", "stat", "/deploy/compose-test")), &st); err != nil {
		t.Fatalf("stat --json: %v", err)
	}
	if st.Path != "/deploy/compose-test" || st.Type != "file" || !strings.HasPrefix(st.Home, "node") {
		t.Fatalf("stat /deploy/compose-test: %+v, want the file homed on node1-3", st)
	}
}

// requireDocker skips the test (fails it with GHBA_REQUIRE_DOCKER=1) when
// the docker CLI, its daemon or docker-compose is missing.
func requireDocker(t *testing.T) {
	t.Helper()
	missing := func(what string, err error) {
		t.Helper()
		msg := fmt.Sprintf("the compose cluster test needs %s: %v (CI's .ci/run installs docker.io and docker-compose)", what, err)
		if os.Getenv(requireDockerEnv) == "1" {
			t.Fatal(msg + "; " + requireDockerEnv + "=1 makes this a failure")
		}
		t.Skip(msg)
	}
	for _, c := range []string{"docker", "docker-compose"} {
		if _, err := exec.LookPath(c); err != nil {
			missing("the "+c+" command", err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		missing("a reachable docker daemon", fmt.Errorf("%w: %s", err, bytes.TrimSpace(out)))
	}
}

// output runs name args with the environment plus env (the caller's
// GHBA_* variables left out, so that none switches TLS or ACLs on) and
// returns its standard output and error together.
func output(ctx context.Context, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "GHBA_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, "DOCKER_BUILDKIT=0")
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return string(out), nil
}

// run is output that fails the test on an error.
func run(ctx context.Context, t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	out, err := output(ctx, env, name, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}

// freePorts returns n TCP ports that were free on 127.0.0.1 a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// pollEvery is the pause between two checks of a condition.
const pollEvery = 500 * time.Millisecond

// waitHealthy waits, within ctx, until the node whose HTTP port is at addr
// answers 200 on /v1/health.
func waitHealthy(ctx context.Context, t *testing.T, addr string) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	last := "no answer yet"
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/health", nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := hc.Do(req); err != nil {
			last = err.Error()
		} else {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s/v1/health: not 200 in time: %s", addr, last)
		case <-tick.C:
		}
	}
}

// waitContainersHealthy waits, within ctx, until docker-compose ps (ps)
// shows three containers and every one healthy: the image's health check
// (ghba health) passes.
func waitContainersHealthy(ctx context.Context, t *testing.T, ps func(context.Context) (string, error)) {
	t.Helper()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		out, err := ps(ctx)
		healthy := strings.Count(out, "(healthy)")
		if err == nil && healthy == 3 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("docker-compose ps: %s healthy of 3 in time (err %v):\n%s", strconv.Itoa(healthy), err, out)
		case <-tick.C:
		}
	}
}
