package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/routing/workload"
	"github.com/ghba/ghba/routing/workload/strace"
)

// newTraceCmd returns "ghba trace", the metadata trace tools.
func newTraceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Metadata trace tools (convert a real program's file system calls to a trace)",
		Long: `Tools for metadata traces in the text format of routing/workload
(docs/trace-format.md), which "ghba sim --trace" replays.`,
		Example: `  strace -f -tt -y -e trace=%file,%process,getdents64,fchdir -o build.strace go build ./...
  ghba trace from-strace --pid-as-client < build.strace > build.trace`,
		Args: subcommandArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newTraceFromStraceCmd())
	return cmd
}

type fromStraceOptions struct {
	pidAsClient bool
	cwd         string
	prefix      string
	keepSystem  bool
	dropFailed  bool
	rewrites    []string
	comment     string
	quiet       bool
}

// newTraceFromStraceCmd returns "ghba trace from-strace".
func newTraceFromStraceCmd() *cobra.Command {
	o := &fromStraceOptions{}
	cmd := &cobra.Command{
		Use:   "from-strace [FILE]",
		Short: "Convert strace -f output into a metadata trace",
		Long: `Convert the output of "strace -f" (read from FILE or stdin) into a metadata
trace (written to stdout). Record with

  strace -f -tt -y -e trace=%file,%process,getdents64,fchdir -o OUT.strace CMD...

-f follows child processes, -tt gives microsecond timestamps (-ttt works too),
-y decorates file descriptors and AT_FDCWD with their paths, which resolves
relative and *at paths exactly; %process (clone, fork, vfork) lets children
inherit their parent's working directory and descriptors. The minimum is
"strace -f -tt -e trace=%file,getdents64"; without -y, give the directory the
command started in with --cwd.

System calls become records: stat, lstat, newfstatat, statx, access,
faccessat, readlink, execve, chdir → stat; open, openat, openat2 → open (with
O_CREAT: create unless the path is known to exist); creat, link, symlink →
create; mkdir → mkdir; unlink → unlink (rmdir with AT_REMOVEDIR); rmdir →
rmdir; rename, renameat, renameat2 → rename; getdents64 → readdir of the
descriptor's directory (once per open). A failed call (= -1 ENOENT ...) is
still a metadata lookup and becomes a stat of its path (--drop-failed drops
it). Paths are resolved against each process's working directory and
cleaned; the paths the trace shows to exist before it creates them are
declared with exists records. Times are seconds since the first timestamp.

Paths under /proc, /sys and /dev are dropped (--keep-system keeps them);
--prefix keeps only one subtree (the paths are not rebased); --rewrite
OLD=NEW (repeatable, first match wins) replaces a path prefix in the
output, for example to hide home directories. A summary (lines, records,
skipped calls by reason) goes to stderr. See docs/trace-format.md.`,
		Example: `  # Record a build three times (warm cache), convert, replay:
  cd ~/src/mymodule
  strace -f -tt -y -e trace=%file,%process,getdents64,fchdir -o /tmp/build.strace \
      sh -c 'for i in 1 2 3; do go build -o /dev/null ./...; done'
  ghba trace from-strace --pid-as-client --rewrite "$PWD=/src" --rewrite "$HOME=/home/user" \
      < /tmp/build.strace > build.trace
  ghba sim hba --trace build.trace

  # Without -y: tell the converter where the command started.
  strace -f -tt -e trace=%file,getdents64,fchdir,clone,clone3,fork,vfork -o ls.strace ls -lR
  ghba trace from-strace --cwd "$PWD" ls.strace > ls.trace`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("%s takes at most one file, got %d (usage: %s)", cmd.CommandPath(), len(args), cmd.UseLine())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opt := strace.Options{
				PIDAsClient: o.pidAsClient,
				Cwd:         o.cwd,
				Prefix:      o.prefix,
				KeepSystem:  o.keepSystem,
				DropFailed:  o.dropFailed,
			}
			for _, s := range o.rewrites {
				r, err := strace.ParseRewrite(s)
				if err != nil {
					return usageError{fmt.Errorf("--rewrite: %w", err)}
				}
				opt.Rewrites = append(opt.Rewrites, r)
			}
			in := cmd.InOrStdin()
			name := "stdin"
			if len(args) == 1 {
				f, err := os.Open(args[0])
				if err != nil {
					return usageError{fmt.Errorf("open strace output: %w", err)}
				}
				defer f.Close()
				in, name = f, args[0]
			}
			return runFromStrace(cmd.OutOrStdout(), cmd.ErrOrStderr(), in, name, opt, o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.pidAsClient, "pid-as-client", false, "one client per process (0, 1, 2… in order of appearance; threads share their process's); default: everything from client 0")
	f.StringVar(&o.cwd, "cwd", "", "working directory the traced command started in (resolves relative paths when strace ran without -y)")
	f.StringVar(&o.prefix, "prefix", "", "keep only paths equal to or under this absolute directory (not rebased; see --rewrite)")
	f.BoolVar(&o.keepSystem, "keep-system", false, "keep paths under /proc, /sys and /dev")
	f.BoolVar(&o.dropFailed, "drop-failed", false, "drop failed calls instead of recording them as stat")
	f.StringArrayVar(&o.rewrites, "rewrite", nil, "OLD=NEW: write paths under OLD as under NEW (repeatable, first match wins)")
	f.StringVar(&o.comment, "comment", "", "write this text as a comment header (may span lines)")
	f.BoolVar(&o.quiet, "quiet", false, "do not print the summary on stderr")
	return cmd
}

// runFromStrace converts in to a trace on out and prints the summary on
// errOut.
func runFromStrace(out, errOut io.Writer, in io.Reader, name string, opt strace.Options, o *fromStraceOptions) error {
	w := workload.NewWriter(out)
	if o.comment != "" {
		if err := w.Comment(o.comment); err != nil {
			return err
		}
	}
	stats, err := strace.Convert(in, w, opt)
	if errors.Is(err, strace.ErrOptions) {
		return usageError{err}
	}
	if err != nil {
		return fmt.Errorf("convert %s: %w", name, err)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if !o.quiet {
		if err := stats.WriteSummary(errOut); err != nil {
			return err
		}
	}
	return nil
}
