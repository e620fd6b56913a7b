package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/node/search"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// errFindDone ends a search at --limit.
var errFindDone = errors.New("find: limit reached")

// findJSON is one line of "find --json".
type findJSON struct {
	Path  string `json:"path"`
	Type  string `json:"type"`
	Size  int64  `json:"size"`
	Mtime string `json:"mtime"`
	Stage string `json:"stage"`
}

// findTypes maps find(1)'s --type letters to the cluster's inode types.
var findTypes = map[string]string{
	"f": rpc.TypeFile, "d": rpc.TypeDir, "l": rpc.TypeSymlink,
	"p": rpc.TypeFIFO, "s": rpc.TypeSocket, "c": rpc.TypeCharDev, "b": rpc.TypeBlockDev,
}

// newFindCmd returns "ghba find".
func newFindCmd(o *clientOptions) *cobra.Command {
	var (
		name, regex, text, typ, size, mtime string
		limit                               int
		sorted                              bool
	)
	cmd := &cobra.Command{
		Use:   "find [PATH | QUERY] [--name GLOB] [--regex RE] [--text WORDS] [--type f|d|l|p|s|c|b] [--size ±N] [--mtime ±D]",
		Short: "Search the namespace by name, related names, text, type, size and modification time",
		Long: `Search below PATH (default /; PATH itself included) for the entries that
match every condition given, as find(1) does: every shard is searched in
parallel by its leader and the results are printed as they arrive (one
path per line; --sort sorts them first). Exits 3 when nothing matched.

An argument that does not start with / is a plain QUERY, searched in the
order of the application modules paper ("Searching Files"): base names
equal to QUERY first (stage exact, printed as they arrive), then related
names (stage related, printed after): the same name in another case, the
same stem ("report" for report.pdf and report.docx), one or two edits away
(for queries of 4 runes or more), or holding every word of QUERY; then
the files whose text holds every word of QUERY (stage text, best match
first), for files imported with "ghba import --content". Each line is
"STAGE<TAB>PATH".

  --name GLOB   the base name matches GLOB (*, ?, [a-z], [!a-z])
  --regex RE    the whole path matches the RE2 expression RE (unanchored)
  --text WORDS  the file's indexed text holds every word of WORDS (any
                case; very common English words such as "the" are not
                indexed); results come best match first within a shard
  --type T      f (file), d (directory), l (symbolic link), p (FIFO),
                s (socket), c or b (character or block device)
  --size N      the size, rounded up to units, is N (+N: more, -N: less);
                units c (bytes), k (KiB), M (MiB), G (GiB), default b
                (512-byte blocks), as in find(1); directories have size 0
  --mtime D     the modification time is D days ago, counted in whole days
                as find(1) does (+D: more, -D: less)

With --json: one object per line {"path", "type" ("file", "dir", "symlink",
"fifo", "socket", "char" or "block"), "size", "mtime" (RFC 3339), "stage"
("exact", "related" or "text" for a plain query, "text" with --text,
"filter" otherwise)}. With ACLs on, a user finds what it could stat.`,
		Example: `  ghba find report.pdf
  ghba find /src --name '*.go' --type f
  ghba find /src --text 'raft leader election' --limit 20
  ghba find /usr --size +1M --mtime -30 --sort
  ghba --json find --regex '/testdata/.*\.trace$' --limit 10`,
		Args: rangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := rpc.FindRequest{Root: "/", Name: strings.ReplaceAll(name, "[!", "[^"), Regex: regex, Text: text}
			switch {
			case len(args) == 0:
			case strings.HasPrefix(args[0], "/"):
				req.Root = args[0]
			default:
				req.Query = args[0]
			}
			if req.Query != "" && req.Text != "" {
				return usageErrorf("find: a plain QUERY searches the text already; give --text with a PATH")
			}
			if err := checkPath(req.Root); err != nil {
				return err
			}
			if typ != "" {
				if req.Type = findTypes[typ]; req.Type == "" {
					return usageErrorf("find: --type %q: want f, d, l, p, s, c or b", typ)
				}
			}
			var err error
			if size != "" {
				if req.MinSize, req.MaxSize, err = parseFindSize(size); err != nil {
					return err
				}
			}
			if mtime != "" {
				if req.MinMtime, req.MaxMtime, err = parseFindMtime(mtime, time.Now()); err != nil {
					return err
				}
			}
			if limit < 0 {
				return usageErrorf("find: --limit must not be negative")
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				return runFind(ctx, cmd, o, c, req, limit, sorted)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "glob on the base name")
	f.StringVar(&regex, "regex", "", "RE2 regular expression on the whole path")
	f.StringVar(&text, "text", "", "words the file's indexed text must all hold")
	f.StringVar(&typ, "type", "", "f, d, l, p (FIFO), s (socket), c or b (devices), as find(1)")
	f.StringVar(&size, "size", "", "size as find(1): [+-]N[cbkMG]")
	f.StringVar(&mtime, "mtime", "", "modification time in days ago as find(1): [+-]D")
	f.IntVar(&limit, "limit", 0, "stop after this many results (0: all)")
	f.BoolVar(&sorted, "sort", false, "sort the results by path before printing")
	return cmd
}

// stageFilter is the stage of a match of conditions (no plain query).
const stageFilter = "filter"

// found is one match with its stage.
type found struct {
	in    rpc.Inode
	stage string
}

// runFind runs the search and prints what it finds: as it arrives, but
// with a plain query the exact names first, then the related ones and
// then the text matches once the search is done (the paper's order);
// with sorted, all at the end by stage and path.
func runFind(ctx context.Context, cmd *cobra.Command, o *clientOptions, c *client.Client, req rpc.FindRequest, limit int, sorted bool) error {
	w := cmd.OutOrStdout()
	emit := func(f *found) error {
		if o.json {
			return writeJSONLine(w, findJSON{Path: f.in.Path, Type: f.in.Type, Size: f.in.Size,
				Mtime: time.Unix(0, f.in.Mtime).UTC().Format(time.RFC3339Nano), Stage: f.stage})
		}
		var err error
		if req.Query != "" {
			_, err = fmt.Fprintf(w, "%s\t%s\n", f.stage, f.in.Path)
		} else {
			_, err = fmt.Fprintln(w, f.in.Path)
		}
		return err
	}
	var later, texts []found
	n := 0
	err := c.Find(ctx, req, func(in *rpc.Inode, stage string) error {
		if stage == "" {
			stage = stageFilter
		}
		n++
		switch {
		case sorted || stage == search.StageRelated:
			later = append(later, found{*in, stage})
		case req.Query != "" && stage == search.StageText:
			texts = append(texts, found{*in, stage}) // best first: kept in order
		default:
			if err := emit(&found{*in, stage}); err != nil {
				return err
			}
		}
		if limit > 0 && n >= limit {
			return errFindDone
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFindDone) {
		return opError("find", req.Root, err)
	}
	slices.SortFunc(later, func(a, b found) int {
		if d := search.StageRank(a.stage) - search.StageRank(b.stage); d != 0 {
			return d
		}
		return strings.Compare(a.in.Path, b.in.Path)
	})
	for _, f := range append(later, texts...) {
		if err := emit(&f); err != nil {
			return err
		}
	}
	if n == 0 {
		return fmt.Errorf("find: nothing matched below %s: %w", req.Root, fs.ErrNotExist)
	}
	return nil
}

// parseFindSize converts find(1)'s -size argument to inclusive byte
// bounds: the size rounded up to units is compared with N.
func parseFindSize(s string) (minSize, maxSize *int64, err error) {
	sign, num := findSign(s)
	unit := int64(512)
	units := map[byte]int64{'c': 1, 'b': 512, 'k': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
	if num != "" {
		if u, ok := units[num[len(num)-1]]; ok {
			unit, num = u, num[:len(num)-1]
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/unit {
		return nil, nil, usageErrorf("find: --size %q: want [+-]N[cbkMG]", s)
	}
	ptr := func(v int64) *int64 { return &v }
	switch sign {
	case '+': // ceil(size/unit) > n
		return ptr(n*unit + 1), nil, nil
	case '-': // ceil(size/unit) < n
		return nil, ptr((n - 1) * unit), nil
	}
	if n == 0 {
		return ptr(0), ptr(0), nil
	}
	return ptr((n-1)*unit + 1), ptr(n * unit), nil
}

// parseFindMtime converts find(1)'s -mtime argument to inclusive bounds
// on the modification time: the age in whole days (rounded down) at now
// is compared with D.
func parseFindMtime(s string, now time.Time) (minMtime, maxMtime *int64, err error) {
	sign, num := findSign(s)
	d, err := strconv.ParseInt(num, 10, 64)
	if err != nil || d < 0 || d > 100_000 {
		return nil, nil, usageErrorf("find: --mtime %q: want [+-]D (days)", s)
	}
	const day = int64(24 * time.Hour)
	t := now.UnixNano()
	ptr := func(v int64) *int64 { return &v }
	switch sign {
	case '+': // age > d days: now - mtime >= (d+1) days
		return nil, ptr(t - (d+1)*day), nil
	case '-': // age < d days: now - mtime < d days
		return ptr(t - d*day + 1), nil, nil
	}
	return ptr(t - (d+1)*day + 1), ptr(t - d*day), nil
}

// findSign splits a leading + or - off s.
func findSign(s string) (byte, string) {
	if s != "" && (s[0] == '+' || s[0] == '-') {
		return s[0], s[1:]
	}
	return 0, s
}
