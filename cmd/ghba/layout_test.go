package main

// The repository's layout as docs/design.md states it: every package in
// `go list ./...` is in the design document's package map and the map names
// no package that does not exist, and the dependency rules the design
// states hold (routing pure, the protocol apart from the client). These
// tests read the whole module, so they live with the one binary at the top
// of the tree.

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// modulePath is the module's import path (go.mod).
const modulePath = "github.com/ghba/ghba"

// moduleRoot returns the directory of go.mod above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// goList runs `go list` with args in the module root and returns its lines.
func goList(t *testing.T, root string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-tags", "hashicorpmetrics"}, args...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.String())
	}
	return strings.Fields(string(out))
}

// packageMap returns the package directories the "Package map" section of
// docs/design.md names: in its fenced block, every line that starts at the
// first column with a path ending in "/" names one.
func packageMap(t *testing.T, root string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		pkgs             []string
		inSection, inMap bool
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
			inSection = strings.TrimSpace(strings.TrimLeft(line, "#")) == "Package map"
			inMap = false
			continue
		case !inSection:
			continue
		case strings.HasPrefix(line, "```"):
			inMap = !inMap
			continue
		case !inMap || line == "" || line[0] == ' ':
			continue
		}
		if dir, _, _ := strings.Cut(line, " "); strings.HasSuffix(dir, "/") {
			pkgs = append(pkgs, strings.TrimSuffix(dir, "/"))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(pkgs) == 0 {
		t.Fatal(`docs/design.md: no package map found (a "Package map" section with a fenced block of package directories)`)
	}
	return pkgs
}

func TestPackageMapMatchesGoList(t *testing.T) {
	root := moduleRoot(t)
	var listed []string
	for _, p := range goList(t, root, "./...") {
		dir := strings.TrimPrefix(strings.TrimPrefix(p, modulePath), "/")
		if dir == "" {
			dir = "."
		}
		listed = append(listed, dir)
	}
	mapped := packageMap(t, root)
	for _, p := range listed {
		if !slices.Contains(mapped, p) {
			t.Errorf("package %s is missing from docs/design.md's package map", p)
		}
	}
	for _, p := range mapped {
		if !slices.Contains(listed, p) {
			t.Errorf("docs/design.md's package map names %s/, which is not a package of the module", p)
		}
	}
}

// TestDependencyRules checks the rules docs/design.md's package map
// states: routing and everything under it is pure (no network, no disk,
// nothing of the server); the protocol package rpc does not import the
// client's routing.
func TestDependencyRules(t *testing.T) {
	root := moduleRoot(t)
	for _, pkg := range goList(t, root, "./routing/...") {
		for _, d := range goList(t, root, "-f", "{{join .Imports \"\\n\"}}", pkg) {
			if d == "os" || d == "os/exec" || d == "syscall" || d == "net" || strings.HasPrefix(d, "net/") {
				t.Errorf("%s imports %s: routing/ must stay pure (no network, no disk)", pkg, d)
			}
		}
		for _, d := range goList(t, root, "-deps", "-f", "{{.ImportPath}}", pkg) {
			if strings.HasPrefix(d, modulePath+"/") && !strings.HasPrefix(d, modulePath+"/routing") {
				t.Errorf("%s depends on %s: routing/ must import nothing of the server or the client", pkg, d)
			}
		}
	}
	for _, d := range goList(t, root, "-deps", "-f", "{{.ImportPath}}", modulePath+"/rpc") {
		if strings.HasPrefix(d, modulePath+"/routing") || d == modulePath+"/rpc/client" {
			t.Errorf("rpc depends on %s: the protocol and server must not depend on the client or its routing", d)
		}
	}
}
