package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Every run labels what it creates (containers, network, volumes, image)
// with labelRun=<prefix> and labelOwner=<owner>: the pid namespace and pid
// of the test process. A run killed before its cleanups ran (go test's
// -timeout panics without running t.Cleanup) leaves them behind; the next
// run removes them once their owner is gone.
const (
	labelRun   = "ghba-chaos"
	labelOwner = "ghba-chaos-owner"
	// sweepMax bounds the leftovers of one kind removed by one sweep.
	sweepMax = 200
	// sweepTimeout bounds the whole sweep.
	sweepTimeout = 2 * time.Minute
)

// RunLabels returns the labels ("key=value") of what a run with this
// prefix creates outside NewCluster (its image, with BuildImage): the
// run's prefix and this process as its owner, so that SweepLeftovers
// removes them once the process is gone.
func RunLabels(prefix string) []string {
	return []string{labelRun + "=" + prefix, labelOwner + "=" + runOwner()}
}

// runOwner returns this process's owner label: "<pid namespace>/<pid>".
func runOwner() string {
	return pidNamespace() + "/" + strconv.Itoa(os.Getpid())
}

func pidNamespace() string {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSuffix(strings.TrimPrefix(ns, "pid:["), "]")
}

// ownerGone reports whether the run that created a resource is certainly
// over: its owner label (or, for resources of older runs without one, the
// pid in its prefix "ghbachaos-<pid>-<hex>") names a process of this pid
// namespace that no longer runs a test binary. A resource of another pid
// namespace (another machine or container sharing the daemon) is never
// judged gone.
func ownerGone(prefix, owner string) (bool, string) {
	var pidStr string
	if owner != "" {
		ns, p, ok := strings.Cut(owner, "/")
		if !ok {
			return false, "malformed owner " + owner
		}
		if ns != pidNamespace() {
			return false, "owned by another pid namespace " + ns
		}
		pidStr = p
	} else {
		parts := strings.SplitN(prefix, "-", 3)
		if len(parts) < 3 || parts[0] != "ghbachaos" {
			return false, "no owner label and no pid in " + prefix
		}
		pidStr = parts[1]
	}
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 {
		return false, "bad pid " + pidStr
	}
	if pid == os.Getpid() {
		return false, "this run"
	}
	cmd, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return true, fmt.Sprintf("pid %d is gone", pid)
	}
	argv0, _, _ := bytes.Cut(cmd, []byte{0})
	if !strings.HasSuffix(string(argv0), ".test") {
		return true, fmt.Sprintf("pid %d now runs %q", pid, argv0)
	}
	return false, fmt.Sprintf("pid %d is alive", pid)
}

// prefixOf returns the run prefix "ghbachaos-<pid>-<hex>" at the start of
// a resource name, or "".
func prefixOf(name string) string {
	parts := strings.SplitN(name, "-", 4)
	if len(parts) < 3 || parts[0] != "ghbachaos" {
		return ""
	}
	return strings.Join(parts[:3], "-")
}

// leftover is one resource of an earlier run.
type leftover struct {
	name, prefix, owner string
}

// listLeftovers runs a docker listing whose lines are "name\tprefix\towner"
// (prefix and owner may be empty) and keeps at most sweepMax.
func (d *Docker) listLeftovers(ctx context.Context, args ...string) ([]leftover, error) {
	out, err := d.Run(ctx, args...)
	if err != nil {
		return nil, err
	}
	var ls []leftover
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Split(strings.TrimSpace(line), "\t")
		if f[0] == "" {
			continue
		}
		l := leftover{name: f[0]}
		if len(f) > 1 {
			l.prefix = f[1]
		}
		if len(f) > 2 {
			l.owner = f[2]
		}
		if l.prefix == "" || l.prefix == "<no value>" {
			l.prefix = prefixOf(l.name)
		}
		if l.owner == "<no value>" {
			l.owner = ""
		}
		ls = append(ls, l)
		if len(ls) == sweepMax {
			break
		}
	}
	return ls, nil
}

// SweepLeftovers removes the containers, networks, volumes and images of
// earlier runs whose owner is gone (see ownerGone), bounded in time and
// number, logging what it removes and what it keeps. Errors are logged,
// not returned: a leftover must not fail a new run.
func (d *Docker) SweepLeftovers(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	start := time.Now()
	lbl := `{{.Label "` + labelRun + `"}}	{{.Label "` + labelOwner + `"}}`
	kinds := []struct {
		kind string
		list []string
		rm   []string
	}{
		// Containers first: they hold the network and the volumes.
		{"container", []string{"ps", "-a", "--filter", "label=" + labelRun, "--format", "{{.Names}}	" + lbl}, []string{"rm", "-f", "-v"}},
		{"network", []string{"network", "ls", "--filter", "label=" + labelRun, "--format", "{{.Name}}	" + lbl}, []string{"network", "rm"}},
		// By name: volumes of older runs have no label.
		{"volume", []string{"volume", "ls", "--filter", "name=ghbachaos-", "--format", "{{.Name}}	" + lbl}, []string{"volume", "rm", "-f"}},
		// By repository: the tag is the prefix (images carry the labels,
		// but docker images cannot print them).
		{"image", []string{"images", "ghba-chaos", "--format", "{{.Repository}}:{{.Tag}}	{{.Tag}}"}, []string{"rmi", "-f"}},
	}
	removed, kept := 0, 0
	for _, k := range kinds {
		ls, err := d.listLeftovers(ctx, k.list...)
		if err != nil {
			d.Log.Warn("sweep: listing leftovers failed", "kind", k.kind, "err", err)
			continue
		}
		var gone []string
		for _, l := range ls {
			owner := l.owner
			if k.kind == "image" {
				owner, _ = d.Run(ctx, "image", "inspect", "-f", `{{index .Config.Labels "`+labelOwner+`"}}`, l.name)
				if owner == "<no value>" {
					owner = ""
				}
			}
			ok, why := ownerGone(l.prefix, owner)
			if !ok {
				kept++
				d.Log.Debug("sweep: keeping", "kind", k.kind, "name", l.name, "why", why)
				continue
			}
			d.Log.Info("sweep: removing a leftover of an earlier run", "kind", k.kind, "name", l.name, "why", why)
			gone = append(gone, l.name)
		}
		if len(gone) == 0 {
			continue
		}
		if k.kind == "container" {
			for _, c := range gone {
				_, _ = d.Run(ctx, "unpause", c) // a paused container may not be removable
			}
		}
		if _, err := d.Run(ctx, append(k.rm, gone...)...); err != nil {
			d.Log.Warn("sweep: removing leftovers failed", "kind", k.kind, "err", err)
			continue
		}
		removed += len(gone)
	}
	d.Log.Info("sweep of earlier runs' leftovers done", "removed", removed, "kept_alive_or_foreign", kept,
		"took", time.Since(start).Round(time.Millisecond))
}
