package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/cmd/ghba/fsimport"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// newSourceCmd returns "ghba source" and its subcommands.
func newSourceCmd(o *clientOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "source",
		Short: "Register directory trees that ghba scan imports and keeps in sync",
		Long: `A source is a directory tree on one machine (a local disk or a mounted network
share: the application modules paper's shared folders) that "ghba scan" on
that machine imports into the namespace and keeps in sync on a schedule.
The registrations live in the cluster (under /.ghba/sources), so every
node lists them; adding and removing one needs the management role when
ACLs are on.`,
		Example: `  ghba source add docs /srv/share/docs --every 30m
  ghba source list
  ghba scan --once
  ghba source discover && ghba source adopt ws1 docs`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newSourceAddCmd(o), newSourceListCmd(o), newSourceRmCmd(o), newSourceDiscoverCmd(o), newSourceAdoptCmd(o))
	return cmd
}

func newSourceAddCmd(o *clientOptions) *cobra.Command {
	var (
		to, machine string
		every       time.Duration
		content     bool
	)
	cmd := &cobra.Command{
		Use:   "add NAME DIR [--to /dest] [--every 10m] [--content]",
		Short: "Register DIR on this machine as source NAME",
		Long: `Register the tree DIR of this machine (--machine: another one) as source
NAME, imported into --to (default /sources/NAME) by "ghba scan" on that
machine every --every. With --content, the first 4 KiB of every text file
are indexed for search by text (as "ghba import --content"). Exit code 4
if NAME is registered already.`,
		Example: `  ghba source add docs /srv/share/docs --every 30m
  ghba source add home /home --to /machines/ws1/home --machine ws1`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if !rpc.ValidSourceName(name) {
				return usageErrorf("source add: name %q: want 1-64 of A-Z a-z 0-9 . _ -", name)
			}
			dir, err := filepath.Abs(args[1])
			if err != nil {
				return err
			}
			if machine == "" {
				if machine, err = os.Hostname(); err != nil {
					return fmt.Errorf("source add: this machine's name: %w", err)
				}
			}
			if to == "" {
				to = "/sources/" + name
			}
			if err := checkPath(to); err != nil {
				return err
			}
			src := &rpc.Source{Name: name, Machine: machine, Dir: dir, Dest: path.Clean(to), Every: every.String()}
			if content {
				src.Content = fsimport.DefaultContentBytes
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.SourcePut(ctx, src, true)
				if err != nil {
					return opError("source add", name, err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), r.Source)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&to, "to", "", "destination directory (default /sources/NAME)")
	f.DurationVar(&every, "every", 10*time.Minute, "time between scans (at least 1s)")
	f.StringVar(&machine, "machine", "", "the machine whose ghba scan imports it (default: this one's host name)")
	f.BoolVar(&content, "content", false, "index the start of every text file for search by text")
	return cmd
}

func newSourceListCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the sources with their machine, schedule and last scan",
		Long: `List the registered sources: name, machine, directory, destination, how often
they are scanned, when the last scan ended, the entries it saw and the
errors it met. With --json: [{name, machine, dir, dest, every, last_scan
(Unix nanoseconds), last_duration, entries, created, updated, deleted,
skipped, errors, last_error}].`,
		Example: `  ghba source list
  ghba --json source list | jq '.[] | select(.errors > 0)'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.Sources(ctx)
				if err != nil {
					return opError("source list", "", err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), r.Sources)
				}
				t := newTable(cmd.OutOrStdout(), "NAME", "MACHINE", "DIR", "DEST", "EVERY", "LAST SCAN", "ENTRIES", "ERRORS")
				for _, s := range r.Sources {
					last := "never"
					if s.LastScan != 0 {
						last = time.Unix(0, s.LastScan).Format(time.DateTime)
					}
					t.row(s.Name, s.Machine, s.Dir, s.Dest, s.Every, last, s.Entries, s.Errors)
				}
				return t.flush()
			})
		},
	}
}

func newSourceRmCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME",
		Short:   "Remove a source's registration (what it imported stays)",
		Example: `  ghba source rm docs`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				if err := c.SourceRemove(ctx, args[0]); err != nil {
					return opError("source rm", args[0], err)
				}
				return nil
			})
		},
	}
}

func newSourceDiscoverCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "discover",
		Short: "List the machines that announce shared folders (ghba share-agent)",
		Long: `List the machines whose "ghba share-agent" announces shared folders to the
cluster: machine, status (alive, or failed: not reachable now), each shared
folder and the source it is adopted as ("-": not adopted; "ghba source
adopt MACHINE SHARE" adopts it). With --json: [{machine, addr, status,
shares: [{name, dir, source}]}].`,
		Example: `  ghba source discover
  ghba --json source discover | jq -r '.[].shares[] | select(.source == null) | .dir'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.DiscoverShares(ctx)
				if err != nil {
					return opError("source discover", "", err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), r.Machines)
				}
				t := newTable(cmd.OutOrStdout(), "MACHINE", "STATUS", "SHARE", "DIR", "SOURCE")
				for _, m := range r.Machines {
					for _, sh := range m.Shares {
						t.row(m.Machine, m.Status, sh.Name, sh.Dir, dash(sh.Source))
					}
				}
				return t.flush()
			})
		},
	}
}

func newSourceAdoptCmd(o *clientOptions) *cobra.Command {
	var (
		as, to  string
		every   time.Duration
		content bool
	)
	cmd := &cobra.Command{
		Use:   "adopt MACHINE SHARE [--as NAME] [--to /dest] [--every 10m] [--content]",
		Short: "Register a discovered shared folder as a source",
		Long: `Register the folder SHARE that MACHINE's share agent announces ("ghba source
discover") as a source named --as (default SHARE), imported into --to
(default /sources/NAME) by that agent every --every, as "ghba source add"
would. Needs the management role when ACLs are on. Exit code 3 if the
machine does not announce SHARE, 4 if the source name is registered
already.`,
		Example: `  ghba source adopt ws1 docs
  ghba source adopt ws1 home --as ws1-home --to /machines/ws1/home --every 1h`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			machine, share := args[0], args[1]
			name := cmp.Or(as, share)
			if !rpc.ValidSourceName(name) {
				return usageErrorf("source adopt: name %q: want 1-64 of A-Z a-z 0-9 . _ -", name)
			}
			if to == "" {
				to = "/sources/" + name
			}
			if err := checkPath(to); err != nil {
				return err
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.DiscoverShares(ctx)
				if err != nil {
					return opError("source adopt", share, err)
				}
				dir := ""
				for _, m := range r.Machines {
					for _, sh := range m.Shares {
						if m.Machine == machine && sh.Name == share {
							dir = sh.Dir
						}
					}
				}
				if dir == "" {
					return opError("source adopt", machine+" "+share,
						fmt.Errorf("%w: no machine %s announces a share %s (ghba source discover lists those announced)", fs.ErrNotExist, machine, share))
				}
				src := &rpc.Source{Name: name, Machine: machine, Dir: dir, Dest: path.Clean(to), Every: every.String()}
				if content {
					src.Content = fsimport.DefaultContentBytes
				}
				pr, err := c.SourcePut(ctx, src, true)
				if err != nil {
					return opError("source adopt", name, err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), pr.Source)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "source %s: %s:%s into %s every %s\n", name, machine, dir, src.Dest, src.Every)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&as, "as", "", "the source's name (default SHARE)")
	f.StringVar(&to, "to", "", "destination directory (default /sources/NAME)")
	f.DurationVar(&every, "every", 10*time.Minute, "time between scans (at least 1s)")
	f.BoolVar(&content, "content", false, "index the start of every text file for search by text")
	return cmd
}

// newScanCmd returns "ghba scan".
func newScanCmd(o *clientOptions) *cobra.Command {
	var (
		once    bool
		machine string
		workers int
	)
	cmd := &cobra.Command{
		Use:   "scan [NAME...] [--once]",
		Short: "Import this machine's sources and keep them in sync on their schedules",
		Long: `Import every source registered for this machine (--machine: another name;
NAME...: only those) as "ghba import" would, then again whenever a source's
--every has passed since its last scan, until interrupted (SIGINT, SIGTERM).
After each scan the source's record gets the time, the entries seen and
what changed or failed ("ghba source list"); a scan that fails is logged and
retried at the next turn. With --once, scan each source once now and exit:
0 when every entry of every source was imported, 1 otherwise.`,
		Example: `  ghba scan --once
  ghba scan docs          # runs until stopped`,
		RunE: func(cmd *cobra.Command, names []string) error {
			if workers < 0 {
				return usageErrorf("scan: --workers must be at least 1 (0: the default)")
			}
			if machine == "" {
				var err error
				if machine, err = os.Hostname(); err != nil {
					return fmt.Errorf("scan: this machine's name: %w", err)
				}
			}
			return withClientSet(cmd, o, importClient, func(ctx context.Context, c *client.Client) error {
				return runScan(ctx, cmd, c, machine, names, once, workers, time.Minute)
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&once, "once", false, "scan once and exit")
	f.StringVar(&machine, "machine", "", "scan the sources of this machine name (default: this one's host name)")
	f.IntVarP(&workers, "workers", "w", 0, fmt.Sprintf("operations in progress per scan (default %d, for a source with text %d)", fsimport.DefaultWorkers, fsimport.DefaultContentWorkers))
	return cmd
}

// errScanFailed is returned by scan --once when a source had errors.
var errScanFailed = errors.New("scan: some entries were not imported")

// runScan scans the machine's sources, once or on their schedules.
// Without once, it looks for new registrations at least every recheck.
func runScan(ctx context.Context, cmd *cobra.Command, c *client.Client, machine string, names []string, once bool, workers int, recheck time.Duration) error {
	w := cmd.ErrOrStderr()
	mine := func() ([]rpc.Source, error) {
		r, err := c.Sources(ctx)
		if err != nil {
			return nil, err
		}
		var out []rpc.Source
		for _, s := range r.Sources {
			if s.Machine == machine && (len(names) == 0 || slices.Contains(names, s.Name)) {
				out = append(out, s)
			}
		}
		for _, n := range names {
			if !slices.ContainsFunc(out, func(s rpc.Source) bool { return s.Name == n }) {
				return nil, usageErrorf("scan: no source %q for machine %s", n, machine)
			}
		}
		return out, nil
	}
	failed := false
	for {
		srcs, err := mine()
		if err != nil {
			if once || ctx.Err() != nil {
				return err
			}
			fmt.Fprintf(w, "scan: listing the sources: %v (retrying in 10s)\n", err)
		}
		if once && len(srcs) == 0 {
			return fmt.Errorf("scan: no source is registered for machine %s", machine)
		}
		next := time.Now().Add(recheck)
		for i := range srcs {
			s := &srcs[i]
			every, _ := time.ParseDuration(s.Every)
			due := time.Unix(0, s.LastScan).Add(every)
			if !once && s.LastScan != 0 && time.Now().Before(due) {
				next = minTime(next, due)
				continue
			}
			sum, err := scanSource(ctx, c, s, workers)
			if err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("scan interrupted: %w", ctx.Err())
				}
				fmt.Fprintf(w, "scan: %s: %v\n", s.Name, err)
			}
			fmt.Fprintf(w, "scan: %s: %d entries, %d created, %d updated, %d deleted, %d skipped, %d errors, %s in %s\n",
				s.Name, s.Entries, s.Created, s.Updated, s.Deleted, s.Skipped, s.Errors, linksSummary(sum), s.LastDuration)
			failed = failed || s.Errors > 0 || s.LastError != ""
			next = minTime(next, time.Now().Add(every))
		}
		if once {
			if failed {
				return errScanFailed
			}
			return nil
		}
		if err != nil {
			next = time.Now().Add(10 * time.Second)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(next)):
		}
	}
}

// scanSource imports s, stores the outcome in its record and returns the
// import's summary.
func scanSource(ctx context.Context, c *client.Client, s *rpc.Source, workers int) (fsimport.Summary, error) {
	start := time.Now()
	var first error
	im, err := fsimport.New(c, fsimport.Options{Source: s.Dir, Dest: s.Dest, Workers: workers, Owners: true, Content: s.Content,
		OnError: func(p string, err error) {
			if first == nil {
				first = fmt.Errorf("%s: %w", p, err)
			}
		}})
	var sum fsimport.Summary
	if err == nil {
		sum, err = im.Run(ctx)
	}
	if err != nil && ctx.Err() != nil {
		return sum, err // interrupted: the record keeps the last complete scan
	}
	s.LastScan, s.LastDuration = time.Now().UnixNano(), time.Since(start).Round(time.Millisecond).String()
	s.Entries, s.Created, s.Updated, s.Deleted, s.Skipped, s.Errors = sum.Entries(), sum.Created, sum.Updated, sum.Deleted, sum.Skipped, sum.Errors
	s.LastError = ""
	switch {
	case err != nil:
		s.LastError = err.Error()
	case first != nil:
		s.LastError = first.Error()
	}
	if _, perr := c.SourcePut(ctx, s, false); perr != nil {
		return sum, fmt.Errorf("recording the scan: %w", perr)
	}
	return sum, err
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
