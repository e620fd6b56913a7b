package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/ghba/ghba/cmd/ghba/fsimport"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// errImportIncomplete is returned when some entries were not imported.
var errImportIncomplete = errors.New("import incomplete")

// newImportCmd returns "ghba import".
func newImportCmd(o *clientOptions) *cobra.Command {
	var (
		to         string
		workers    int
		dryRun     bool
		noOwners   bool
		verbose    bool
		noProgress bool
		content    bool
		textBytes  int
		xattrs     bool
	)
	cmd := &cobra.Command{
		Use:   "import DIR",
		Short: "Import a local directory tree's metadata, or bring an earlier import up to date",
		Long: `Import the metadata of the local tree DIR into the directory --to (default
/ plus DIR's base name): every directory, regular file and symbolic link
with its mode, owner, size and modification time (the access time is set
on creation only). Devices, sockets and FIFOs are copied with their device
numbers (skipped and counted while the cluster cannot keep them yet).
--xattrs copies "user." extended attributes too ("trusted." and "security."
ones describe the source machine and are left out). A file with several
names in DIR (hard links) is one inode with that many names in the
destination; a cluster whose nodes cannot all link yet gets a file of its
own per name (said once, and counted).

The destination mirrors the source: run again, the import compares both
sides and applies only what changed (new, modified and deleted entries), so
an interrupted import resumes where it stopped and a later one is
incremental. Entries of the destination that DIR does not have are DELETED;
--to / is refused. --dry-run prints the changes without making them.

Owners are kept (--no-owners gives new entries your uid and gid and stops
comparing owners); with ACLs on, keeping them needs a root token.

--content also indexes the first --content-bytes (default 4 KiB) of every
text file for "ghba find --text" and the text stage of a plain query. A
file is text when its start is valid UTF-8 that content sniffing takes for
text, whatever its name. Texts are read for new files, for files whose size
or mtime changed, and for files that have none yet; an import without
--content keeps the texts already indexed.

On a terminal a progress bar shows entries/s and the time left; otherwise
a progress line goes to stderr every 5 s. -v (and --dry-run) print every
change as "create|update|delete PATH [fields]" ("[link]": another name of
a file). The summary counts created, updated, deleted, skipped (special
files), errors and unchanged entries, then the hard links made (among the
created and updated) and the names imported as copies because the cluster
cannot link; with --json it is one object {"created", "updated",
"deleted", "skipped", "errors", "unchanged", "links", "links_as_copies"}
(with --dry-run: what would change). Exits 0 only
when every entry was imported or skipped; 1 when some failed (each is
printed on stderr).`,
		Example: `  ghba import ~/src/linux --to /src/linux
  ghba import /usr/share/doc --dry-run
  ghba import ~/notes --to /notes --content
  ghba import ~/photos --to /photos --xattrs
  ghba --json import /data/projects --to /projects --workers 1024`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := filepath.Abs(args[0])
			if err != nil {
				return err
			}
			if to == "" {
				to = "/" + filepath.Base(src)
			}
			if err := checkPath(to); err != nil {
				return err
			}
			if workers < 0 {
				return usageErrorf("import: --workers must be at least 1 (0: the default)")
			}
			if textBytes < 1 || textBytes > rpc.MaxTextLen {
				return usageErrorf("import: --content-bytes must be 1 to %d", rpc.MaxTextLen)
			}
			if !content {
				textBytes = 0
			}
			return withClientSet(cmd, o, importClient, func(ctx context.Context, c *client.Client) error {
				return runImport(ctx, cmd, o, c, fsimport.Options{
					Source: src, Dest: path.Clean(to), Workers: workers, Owners: !noOwners, DryRun: dryRun,
					Content: textBytes, Xattrs: xattrs,
				}, verbose || dryRun, !noProgress)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&to, "to", "", "destination directory in the namespace (default: / plus DIR's base name)")
	f.IntVarP(&workers, "workers", "w", 0, fmt.Sprintf("operations in progress: scans, updates, directories waiting for their creates (default %d, with --content %d)", fsimport.DefaultWorkers, fsimport.DefaultContentWorkers))
	f.BoolVarP(&dryRun, "dry-run", "n", false, "print the changes without making them")
	f.BoolVar(&noOwners, "no-owners", false, "do not keep or compare the source's owners")
	f.BoolVarP(&verbose, "verbose", "v", false, "print every change")
	f.BoolVar(&noProgress, "no-progress", false, "no progress bar or progress lines")
	f.BoolVar(&content, "content", false, "index the start of every text file for search by text")
	f.BoolVar(&xattrs, "xattrs", false, "copy and compare the user. extended attributes")
	f.IntVar(&textBytes, "content-bytes", fsimport.DefaultContentBytes, "bytes of each text file indexed with --content")
	return cmd
}

// importHomeCache is the home cache of import and scan clients: they make
// every directory of a tree and then its entries, some time later; with
// the default cache (8,192) a tree of more directories than that sends
// their batches to a node that forwards them (2 in 3 on 3 nodes).
const importHomeCache = 1 << 17

// importClient sets the options of the import and scan clients.
func importClient(o *client.Options) { o.HomeCacheSize = importHomeCache }

// runImport runs one import with progress output and prints its summary.
func runImport(ctx context.Context, cmd *cobra.Command, o *clientOptions, c *client.Client, opts fsimport.Options, changes, progress bool) error {
	out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	var bar *progressbar.ProgressBar
	if changes && !o.json {
		opts.OnChange = func(ch fsimport.Change) {
			line := ch.Kind + " " + ch.Path
			if len(ch.Fields) > 0 {
				line += " [" + strings.Join(ch.Fields, " ") + "]"
			}
			if bar != nil {
				_ = bar.Clear()
			}
			fmt.Fprintln(out, line)
		}
	}
	opts.OnError = func(p string, err error) {
		if bar != nil {
			_ = bar.Clear()
		}
		fmt.Fprintf(errOut, "import: %s: %v\n", p, err)
	}
	opts.OnNotice = func(msg string) {
		if bar != nil {
			_ = bar.Clear()
		}
		fmt.Fprintf(errOut, "import: note: %s\n", msg)
	}
	im, err := fsimport.New(c, opts)
	if err != nil {
		return usageError{err}
	}
	start := time.Now()
	done := make(chan struct{})
	stopped := make(chan struct{})
	if progress {
		term := false
		if f, ok := errOut.(*os.File); ok {
			term = isatty.IsTerminal(f.Fd())
		}
		if term {
			total, err := fsimport.CountTree(ctx, opts.Source)
			if err != nil {
				return err
			}
			bar = progressbar.NewOptions64(total,
				progressbar.OptionSetWriter(errOut), progressbar.OptionSetDescription("import"),
				progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("entries"),
				progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(200*time.Millisecond),
				progressbar.OptionClearOnFinish())
		}
		go func() {
			defer close(stopped)
			showProgress(errOut, im, bar, start, done)
		}()
	} else {
		close(stopped)
	}
	sum, runErr := im.Run(ctx)
	close(done)
	<-stopped
	if bar != nil {
		_ = bar.Finish()
	}
	elapsed := time.Since(start)
	if o.json {
		if err := writeJSON(out, sum); err != nil {
			return err
		}
	} else {
		verb := "imported"
		if opts.DryRun {
			verb = "dry run (nothing changed)"
		}
		fmt.Fprintf(out, "%s %s into %s: %d created, %d updated, %d deleted, %d skipped, %d errors, %d unchanged, %s in %s (%.0f entries/s)\n",
			verb, opts.Source, opts.Dest, sum.Created, sum.Updated, sum.Deleted, sum.Skipped, sum.Errors, sum.Unchanged,
			linksSummary(sum), elapsed.Round(time.Millisecond), float64(sum.Entries())/elapsed.Seconds())
	}
	switch {
	case runErr != nil && ctx.Err() != nil:
		return fmt.Errorf("import interrupted; run it again to resume: %w", runErr)
	case runErr != nil:
		return runErr
	case sum.Errors > 0:
		return fmt.Errorf("%w: %d entries failed", errImportIncomplete, sum.Errors)
	}
	return nil
}

// showProgress updates bar, or without one prints a line every 5 s, until
// done is closed.
func showProgress(w io.Writer, im *fsimport.Importer, bar *progressbar.ProgressBar, start time.Time, done <-chan struct{}) {
	every := 5 * time.Second
	if bar != nil {
		every = 200 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		s := im.Progress()
		if bar != nil {
			_ = bar.Set64(s.Entries())
			continue
		}
		fmt.Fprintf(w, "import: %d entries (%d created, %d updated, %d deleted, %d errors, %s), %.0f entries/s\n",
			s.Entries(), s.Created, s.Updated, s.Deleted, s.Errors, linksSummary(s), float64(s.Entries())/time.Since(start).Seconds())
	}
}

// linksSummary describes the hard links of an import's summary: "N hard
// links", and the names imported as copies when there are any.
func linksSummary(s fsimport.Summary) string {
	out := fmt.Sprintf("%d hard links", s.Links)
	if s.LinksAsCopies > 0 {
		out += fmt.Sprintf(" (%d names imported as copies: the cluster cannot link)", s.LinksAsCopies)
	}
	return out
}
