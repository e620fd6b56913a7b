package contents

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rcloneVersion is the rclone that .ci/run installs.
const rcloneVersion = "v1.76.0"

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// findRclone returns the rclone binary from PATH or $(go env GOPATH)/bin.
// Without one the test skips, or fails when GHBA_REQUIRE_S3=1.
func findRclone(t testing.TB) string {
	if p, err := exec.LookPath("rclone"); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			gopath = strings.TrimSpace(string(out))
		}
	}
	for _, dir := range filepath.SplitList(gopath) {
		p := filepath.Join(dir, "bin", "rclone")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	msg := "rclone not found on PATH nor in $(go env GOPATH)/bin; install it with `go install github.com/rclone/rclone@" + rcloneVersion + "`"
	if os.Getenv("GHBA_REQUIRE_S3") == "1" {
		t.Fatal(msg + " (GHBA_REQUIRE_S3=1)")
	}
	t.Skip(msg)
	return ""
}

// startS3 runs `rclone serve s3` on a temporary directory with one bucket
// and returns the store URL for it, credentials in the environment.
func startS3(t *testing.T) string {
	bin := findRclone(t)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bucket"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "rclone.conf")
	if err := os.WriteFile(conf, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const key, secret = "ghbatestkey", "ghbatestsecret"
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	var logs bytes.Buffer
	cmd := exec.Command(bin, "serve", "s3", "--config", conf, "--auth-key", key+","+secret, "--addr", addr, dir)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("rclone output:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("rclone serve s3 exited: %v\n%s", err, logs.String())
		case <-time.After(50 * time.Millisecond): // poll interval
		}
		if time.Now().After(deadline) {
			t.Fatalf("rclone serve s3 not listening on %s after 30s: %v", addr, err)
		}
	}
	t.Setenv("AWS_ACCESS_KEY_ID", key)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return fmt.Sprintf("s3://bucket?endpoint=http://%s&use_path_style=true&disable_https=true&region=us-east-1", addr)
}

// TestS3 runs the store and file tests against a real S3-compatible server.
func TestS3(t *testing.T) {
	url := startS3(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Run("store", func(t *testing.T) { storeBasics(t, ctx, s) })
	t.Run("random", func(t *testing.T) { randomOps(t, s, 21, 200) })
	t.Run("sequential", func(t *testing.T) {
		const bs = 256 << 10
		f := s.OpenFile(23, 0, Layout{BlockSize: bs}, FileOptions{MaxDirty: 4 * bs})
		defer f.Close()
		m := &model{t: t, f: f}
		r := newTestRand(23)
		chunk := make([]byte, 100000)
		for int64(len(m.want)) < 12*bs+5 {
			for i := range chunk {
				chunk[i] = byte(r.Uint32())
			}
			m.write(ctx, int64(len(m.want)), chunk)
		}
		sv := &server{t: t, s: s, ino: 23, seen: map[BlockRef][32]byte{}, layout: Layout{BlockSize: bs}.Encode()}
		sv.commit(ctx, f)
		sv.check(ctx)
		l, size := sv.get()
		f2 := s.OpenFile(23, size, l, FileOptions{Cache: NewBlockCache(6 * bs)})
		defer f2.Close()
		(&model{t: t, f: f2, want: m.want}).readAll(ctx)
	})
}
