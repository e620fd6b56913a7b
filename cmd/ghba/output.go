package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ghba/ghba/rpc"
)

// writeJSON prints v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

// writeJSONLine writes v as one line of JSON (a stream of objects).
func writeJSONLine(w io.Writer, v any) error {
	if err := json.NewEncoder(w).Encode(v); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

// table writes aligned columns: a header row, then rows.
type table struct {
	tw *tabwriter.Writer
}

// newTable starts a table on w with the given column headers (none: no
// header row).
func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(toAny(header)...)
	}
	return t
}

// toAny converts strings to table cells.
func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// row adds one row; values are formatted with %v.
func (t *table) row(cols ...any) {
	for i, c := range cols {
		if i > 0 {
			fmt.Fprint(t.tw, "\t")
		}
		fmt.Fprint(t.tw, c)
	}
	fmt.Fprint(t.tw, "\n")
}

// flush writes the table out.
func (t *table) flush() error {
	if err := t.tw.Flush(); err != nil {
		return fmt.Errorf("writing output: %w", err)
	}
	return nil
}

// dash prints "-" for an empty string.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatMode prints permission bits as octal and symbolically, e.g.
// "0644 (-rw-r--r--)".
func formatMode(in *rpc.Inode) string {
	return fmt.Sprintf("%04o (%s)", in.Mode&0o7777, in.FileMode())
}

// formatTime prints Unix nanoseconds as RFC 3339 with nanoseconds in local
// time ("-" for 0).
func formatTime(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return time.Unix(0, ns).Format(time.RFC3339Nano)
}

// printStat prints a stat result as a two-column table.
func printStat(w io.Writer, st *rpc.StatResponse) error {
	t := newTable(w)
	t.row("path", st.Path)
	t.row("id", formatID(st.ID))
	t.row("type", st.Type)
	switch st.Type {
	case rpc.TypeSymlink:
		t.row("target", st.Target)
	case rpc.TypeCharDev, rpc.TypeBlockDev:
		t.row("device", fmt.Sprintf("%d, %d", unix.Major(st.Rdev), unix.Minor(st.Rdev)))
	}
	t.row("mode", formatMode(&st.Inode))
	t.row("uid", st.UID)
	t.row("gid", st.GID)
	t.row("size", st.Size)
	t.row("mtime", formatTime(st.Mtime))
	t.row("atime", formatTime(st.Atime))
	t.row("ctime", formatTime(st.Ctime))
	t.row("nlink", st.Nlink)
	if len(st.Xattrs) > 0 {
		names := make([]string, len(st.Xattrs))
		for i, x := range st.Xattrs {
			names[i] = x.Name
		}
		t.row("xattrs", strings.Join(names, " "))
	}
	t.row("version", st.Version)
	t.row("home", dash(st.Home))
	if st.Anchor != "" {
		t.row("record", st.Anchor) // a file with several names: where its attributes are
	}
	t.row("level", dash(st.Level))
	t.row("hops", st.Hops)
	return t.flush()
}

// formatID returns an inode id, "-" for 0 (an inode created before ids
// existed that its shard has not numbered yet).
func formatID(id uint64) string {
	if id == 0 {
		return "-"
	}
	return strconv.FormatUint(id, 10)
}

// printLookup prints lookup results as a table.
func printLookup(w io.Writer, rs ...*rpc.LookupResponse) error {
	t := newTable(w, "PATH", "TYPE", "HOME", "LEADER", "LEVEL", "HOPS")
	for _, r := range rs {
		t.row(r.Path, dash(r.Type), dash(r.Home), dash(r.Leader), dash(r.Level), r.Hops)
	}
	return t.flush()
}

// printDir prints directory entries as a table (directories with a
// trailing slash).
func printDir(w io.Writer, entries []rpc.DirEntry) error {
	t := newTable(w, "TYPE", "NAME", "HOME")
	for _, e := range entries {
		name := e.Name
		if e.Type == rpc.TypeDir {
			name += "/"
		}
		t.row(e.Type, name, dash(e.Home))
	}
	return t.flush()
}

// printMembers prints the members as a table.
func printMembers(w io.Writer, ms []rpc.Member) error {
	t := newTable(w, "ID", "GROUP", "STATUS", "RPC ADDR", "RAFT ROLE", "FILES", "REPLICAS", "LEADS", "HOSTS", "BUILD", "VERSIONS")
	for _, m := range ms {
		t.row(m.ID, dash(m.Group), m.Status, dash(m.RPCAddr), dash(m.RaftRole), m.Files, m.ReplicasHeld,
			dash(strings.Join(m.ShardsLed, ",")), dash(strings.Join(m.ShardsHosted, ",")), dash(m.Build), dash(versionsText(m)))
	}
	return t.flush()
}

// versionsText renders a member's formats: "log=2(in use 2),snap=1,…".
func versionsText(m rpc.Member) string {
	keys := make([]string, 0, len(m.Versions))
	for k := range m.Versions {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		p := fmt.Sprintf("%s=%d", k, m.Versions[k])
		if k == "log" && m.LogFormatInUse > 0 {
			p += fmt.Sprintf("(in use %d)", m.LogFormatInUse)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ",")
}

// printShards prints the shards as a table.
func printShards(w io.Writer, ss []rpc.ShardInfo) error {
	t := newTable(w, "SHARD", "GROUP", "LEADER", "OWNER", "REPLICAS", "FILES", "APPLIED", "MAX LAG")
	for _, s := range ss {
		reps := strings.Join(s.Replicas, ",")
		for _, l := range s.Learners {
			reps += " +" + l // being added: catching up before it votes
		}
		t.row(s.Shard, dash(s.Group), dash(s.Leader), dash(s.Owner), dash(reps), s.Files, s.AppliedIndex, s.MaxLag)
	}
	return t.flush()
}

// shardsJSON returns the shards for "shards --json", with replicas never
// null.
func shardsJSON(ss []rpc.ShardInfo) []rpc.ShardInfo {
	out := make([]rpc.ShardInfo, len(ss))
	for i, s := range ss {
		if s.Replicas == nil {
			s.Replicas = []string{}
		}
		out[i] = s
	}
	return out
}

// printGroups prints the groups as a table; REPLICAS shows the segment
// replicas assigned to each member (the assignment balance).
func printGroups(w io.Writer, r *rpc.GroupsResponse) error {
	t := newTable(w, "GROUP", "LEADER", "SIZE", "MAX", "MEMBERS", "REPLICAS", "SETTLED")
	for _, g := range r.Groups {
		var reps []string
		for _, id := range slices.Sorted(maps.Keys(g.Replicas)) {
			reps = append(reps, id+"="+strconv.Itoa(g.Replicas[id]))
		}
		repl := "-"
		if len(reps) > 0 {
			repl = strings.Join(reps, " ")
		}
		settled := "yes"
		if !g.Settled {
			settled = "no: " + g.Unsettled
		}
		maxSize := "-"
		switch {
		case g.Auto && g.MaxGroupSize > 0:
			maxSize = "auto:" + strconv.Itoa(g.MaxGroupSize)
		case g.MaxGroupSize > 0:
			maxSize = strconv.Itoa(g.MaxGroupSize)
		}
		t.row(g.Group, dash(g.Leader), len(g.Members), maxSize, dash(strings.Join(g.Members, ",")), repl, settled)
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, g := range r.Groups {
		if c := g.SizeChoice; c != nil {
			if _, err := fmt.Fprintln(w, groupSizeText(g.Group, c)); err != nil {
				return err
			}
		}
	}
	if r.Settled {
		_, err := fmt.Fprintln(w, "cluster settled")
		return err
	}
	_, err := fmt.Fprintf(w, "cluster not settled: %s\n", r.Unsettled)
	return err
}

// groupSizeText describes how the leader of group g chose its size: the
// M in use and the model's optimum, the inputs (those not measured yet
// are assumptions) and Γ around the optimum.
func groupSizeText(g string, c *rpc.GroupSizeChoice) string {
	var b strings.Builder
	fmt.Fprintf(&b, "group %s: max_group_size auto, M %d (model's optimum %d of %d..%d): N %d, P_LRU %.3f, P_L2 %.3f, "+
		"D(m) = %.3f + %.3f·(m−1) ms, replica %.0f B, L1 %.0f B, budget %.0f B; measured: %s\n  Γ:",
		g, c.M, c.Best, c.MinM, c.MaxM, c.Servers, c.PLRU, c.PL2, c.RTTMs, c.PerMsgMs, c.ReplicaBytes, c.L1Bytes, c.BudgetBytes,
		strings.Join(c.Measured, ", "))
	for _, p := range c.Gamma {
		if p.M >= c.Best-3 && p.M <= c.Best+3 || p.M == c.M {
			fmt.Fprintf(&b, " M=%d %.4g", p.M, p.Gamma)
		}
	}
	return b.String()
}

// dirEntryJSON is one element of "ls --json".
type dirEntryJSON struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Home string `json:"home,omitempty"`
	ID   uint64 `json:"id,omitempty"`
}

// lsJSON converts entries to the "ls --json" array (never null).
func lsJSON(entries []rpc.DirEntry) []dirEntryJSON {
	out := make([]dirEntryJSON, len(entries))
	for i, e := range entries {
		out[i] = dirEntryJSON(e)
	}
	return out
}

// membersJSON returns the members for "members --json" (never null).
func membersJSON(ms []rpc.Member) []rpc.Member {
	if ms == nil {
		return []rpc.Member{}
	}
	return ms
}

// groupsJSON returns the groups for "groups --json", with members never
// null.
func groupsJSON(gs []rpc.GroupInfo) []rpc.GroupInfo {
	out := make([]rpc.GroupInfo, len(gs))
	for i, g := range gs {
		if g.Members == nil {
			g.Members = []string{}
		}
		out[i] = g
	}
	return out
}
