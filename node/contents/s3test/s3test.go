// Package s3test starts a real S3-compatible server for tests: rclone's
// `serve s3` (installed by .ci/run with go install) on a temporary
// directory with one bucket. Tests of node/contents and of the mount use
// it; without rclone they skip, or fail when GHBA_REQUIRE_S3=1.
package s3test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// RcloneVersion is the rclone that .ci/run installs.
const RcloneVersion = "v1.76.0"

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
	msg := "rclone not found on PATH nor in $(go env GOPATH)/bin; install it with `go install github.com/rclone/rclone@" + RcloneVersion + "`"
	if os.Getenv("GHBA_REQUIRE_S3") == "1" {
		t.Fatal(msg + " (GHBA_REQUIRE_S3=1)")
	}
	t.Skip(msg)
	return ""
}

// Start runs `rclone serve s3` on a temporary directory with one bucket
// until the test ends, and returns the store URL for it (node/contents.Open),
// with the credentials in the test's environment (t.Setenv: processes the
// test starts inherit them).
func Start(t *testing.T) string {
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
