package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// runDirBench runs bench's mkdir, create, stat and unlink phases through
// the file system mounted at bo.dir (bench --dir): the system calls a
// program makes, so that a ghba mount is measured against the Go client
// with the same tree and concurrency.
func runDirBench(cmd *cobra.Command, o *clientOptions, bo *benchOptions) error {
	for _, p := range bo.phases {
		if !slices.Contains(dirPhases, p) {
			return usageErrorf("bench --dir: phase %q is not a file system call (want %s)", p, strings.Join(dirPhases, ", "))
		}
	}
	if st, err := os.Stat(bo.dir); err != nil || !st.IsDir() {
		return usageErrorf("bench --dir %s: not a directory (%v)", bo.dir, err)
	}
	ctx := cmd.Context()
	tree := makeBenchTree(bo.prefix, bo.paths, bo.filesPerDir)
	b := &benchRun{ctx: ctx, o: o, bo: bo, paths: tree.all(), entry: bo.dir}
	b.rep = &benchReport{Prefix: bo.prefix, Paths: bo.paths, Files: len(tree.files), Concurrency: bo.concurrency, Nodes: []string{bo.dir}}
	for _, l := range tree.dirs {
		b.rep.Dirs += len(l)
	}
	local := func(p string) string { return filepath.Join(bo.dir, p) }
	// syscallPhase runs call on each level of paths, one level after the
	// other, as one phase.
	syscallPhase := func(phase string, levels [][]string, call func(p string) error) {
		b.timed(phase, bo.dir, func(res *phaseResult) {
			for _, paths := range levels {
				runOps(ctx, res, paths, bo.concurrency, func(_ context.Context, p string) (string, int, error) {
					return "", 0, call(local(p))
				})
			}
		})
	}
	run := func(phase string) bool { return slices.Contains(bo.phases, phase) }
	if run(phaseMkdir) {
		if err := os.MkdirAll(local(bo.prefix), 0o755); err != nil {
			return fmt.Errorf("bench: mkdir %s: %w", local(bo.prefix), err)
		}
		syscallPhase(phaseMkdir, tree.dirs, func(p string) error { return unix.Mkdir(p, 0o755) })
	}
	if run(phaseCreate) {
		syscallPhase(phaseCreate, [][]string{tree.files}, sysCreate)
	}
	if run(phaseStat) {
		syscallPhase(phaseStat, [][]string{b.paths}, sysStat)
	}
	if run(phaseUnlink) {
		syscallPhase(phaseUnlink, [][]string{tree.files}, unix.Unlink)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return reportBench(cmd, o, bo, b.rep)
}
