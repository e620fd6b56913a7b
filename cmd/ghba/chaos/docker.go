package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// dockerCallTimeout bounds one docker CLI invocation that has no tighter
// deadline of its own.
const dockerCallTimeout = 2 * time.Minute

// Docker runs the docker CLI.
type Docker struct {
	// Log receives every command run (debug) and its failures.
	Log *slog.Logger
}

// Run runs "docker args..." and returns its trimmed standard output; on a
// non-zero exit the error carries the standard error.
func (d *Docker) Run(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, dockerCallTimeout)
	defer cancel()
	return d.run(ctx, nil, "docker", args...)
}

func (d *Docker) run(ctx context.Context, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	d.Log.Debug("exec", "cmd", name, "args", args, "err", err)
	if err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// CheckDaemon returns a clear error if the docker CLI is missing or its
// daemon does not answer.
func (d *Docker) CheckDaemon(ctx context.Context) error {
	if _, err := exec.LookPath("docker"); err != nil {
		return fmt.Errorf("chaos: the docker CLI is not installed (the container fault suite needs docker and a running daemon; set GHBA_CHAOS=off or use -short to skip it): %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := d.Run(ctx, "version", "--format", "{{.Server.Version}}")
	if err != nil {
		return fmt.Errorf("chaos: the docker daemon is not reachable (the container fault suite needs it; set GHBA_CHAOS=off or use -short to skip it): %w", err)
	}
	d.Log.Info("docker daemon", "server_version", v)
	return nil
}

// CPUTime returns the CPU time the processes of a running container have
// used, from its cgroup on this host: cgroup v1's cpuacct.usage or cgroup
// v2's cpu.stat, under the cgroupfs or the systemd driver's path.
func (d *Docker) CPUTime(ctx context.Context, container string) (time.Duration, error) {
	id, err := d.Run(ctx, "inspect", "--format", "{{.Id}}", container)
	if err != nil {
		return 0, fmt.Errorf("chaos: CPU time of %s: %w", container, err)
	}
	for _, f := range []struct{ path, key string }{
		{"/sys/fs/cgroup/cpuacct/docker/" + id + "/cpuacct.usage", ""},
		{"/sys/fs/cgroup/docker/" + id + "/cpu.stat", "usage_usec"},
		{"/sys/fs/cgroup/system.slice/docker-" + id + ".scope/cpu.stat", "usage_usec"},
	} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			continue
		}
		if f.key == "" { // nanoseconds
			ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("chaos: CPU time of %s: %s: %w", container, f.path, err)
			}
			return time.Duration(ns), nil
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, f.key+" "); ok {
				us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("chaos: CPU time of %s: %s: %w", container, f.path, err)
				}
				return time.Duration(us) * time.Microsecond, nil
			}
		}
	}
	return 0, fmt.Errorf("chaos: CPU time of %s: no cgroup of container %s found under /sys/fs/cgroup", container, id)
}

// DockerfilePath is the image of one ghba node (nothing but the static
// binary, FROM scratch), relative to the module root: the one `make image`
// builds as well.
const DockerfilePath = "deploy/Dockerfile"

// BuildImage builds the static ghba binary from the module at modRoot
// (CGO_ENABLED=0, -tags hashicorpmetrics plus extraTags, e.g.
// "ghba_broken") into a temporary build context and builds the image tag
// from DockerfilePath (FROM scratch) with the given labels ("key=value").
func (d *Docker) BuildImage(ctx context.Context, modRoot, tag string, extraTags []string, labels ...string) error {
	dir, err := os.MkdirTemp("", "ghba-chaos-image-*")
	if err != nil {
		return fmt.Errorf("chaos: build context: %w", err)
	}
	defer os.RemoveAll(dir)
	bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	start := time.Now()
	tags := strings.Join(append([]string{"hashicorpmetrics"}, extraTags...), ",")
	if _, err := d.runIn(bctx, modRoot, []string{"CGO_ENABLED=0"}, "go", "build", "-tags", tags, "-trimpath",
		"-o", filepath.Join(dir, "ghba"), "./cmd/ghba"); err != nil {
		return fmt.Errorf("chaos: build ghba: %w", err)
	}
	dockerfile, err := os.ReadFile(filepath.Join(modRoot, DockerfilePath))
	if err != nil {
		return fmt.Errorf("chaos: build context: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), dockerfile, 0o644); err != nil {
		return fmt.Errorf("chaos: build context: %w", err)
	}
	// The classic builder: it needs no buildx plugin and pulls nothing for
	// FROM scratch.
	args := []string{"build", "-q", "-t", tag}
	for _, l := range labels {
		args = append(args, "--label", l)
	}
	if _, err := d.run(bctx, []string{"DOCKER_BUILDKIT=0"}, "docker", append(args, dir)...); err != nil {
		return fmt.Errorf("chaos: docker build: %w", err)
	}
	d.Log.Info("image built", "tag", tag, "build_tags", tags, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

func (d *Docker) runIn(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ModuleRoot returns the directory of the main module's go.mod.
func ModuleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("chaos: go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("chaos: not inside the ghba module")
	}
	return filepath.Dir(gomod), nil
}

// runCombined runs a command and returns its standard output and error
// interleaved (docker logs writes the container's stderr to stderr).
func (d *Docker) runCombined(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return out, nil
}
