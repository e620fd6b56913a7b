package namespace_test

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
)

// TestFindText creates files with texts (Create, BatchCreate) through
// every node, then searches them by text through the shards' leaders,
// page by page, across text changes, a rename and a removal, and checks
// the requests that must fail.
func TestFindText(t *testing.T) { forEachR(t, testFindText) }

func testFindText(t *testing.T, r int) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: r})
	o := via(c, "n1")
	mustOK(t, o.mkdir("/t/docs", true), "mkdir")
	texts := map[string]string{}
	for i, id := range c.IDs {
		p := fmt.Sprintf("/t/docs/raft%d.md", i)
		texts[p] = fmt.Sprintf("Raft elects a leader, number %d; the leader replicates the log.", i)
		var resp rpc.CreateResponse
		mustOK(t, via(c, id).call(rpc.MethodCreate, &rpc.CreateRequest{Path: p, Mode: 0o644, Text: texts[p]}, &resp), "create")
		if resp.Inode.Text != "" || !resp.Inode.HasText {
			t.Errorf("create response: text %q, has_text %v", resp.Inode.Text, resp.Inode.HasText)
		}
	}
	batch := &rpc.BatchCreateRequest{Dir: "/t/docs"}
	for i := range 20 {
		e := rpc.BatchCreateEntry{Name: fmt.Sprintf("note%02d.txt", i), Type: rpc.TypeFile, Mode: 0o644}
		if i%2 == 0 {
			e.Text = fmt.Sprintf("A Bloom filter note %d about membership", i)
			texts["/t/docs/"+e.Name] = e.Text
		}
		batch.Entries = append(batch.Entries, e)
	}
	var br rpc.BatchCreateResponse
	mustOK(t, via(c, "n2").call(rpc.MethodBatchCreate, batch, &br), "batch create")
	for i, res := range br.Results {
		if err := res.Err(); err != nil || res.Inode.Text != "" || res.Inode.HasText != (i%2 == 0) {
			t.Errorf("batch create %d: %+v", i, res)
		}
	}
	for p := range texts {
		st, err := via(c, "n3").stat(p)
		if err != nil || !st.HasText || st.Text != "" {
			t.Errorf("stat %s: %+v %v", p, st, err)
		}
	}

	want := func(words, root string, paths ...string) {
		t.Helper()
		w := map[string]string{}
		for _, p := range paths {
			w[p] = "match"
		}
		var got map[string]string
		// Entries placed on another shard are applied there a moment
		// after they are acknowledged: a bounded wait.
		for try := 0; try < 100; try++ {
			if got = findAll(t, c, &rpc.FindRequest{Root: root, Text: words, Limit: 3}); maps.Equal(got, w) {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Errorf("text %q below %s: %v, want %v", words, root, got, w)
	}
	want("leader", "/", "/t/docs/raft0.md", "/t/docs/raft1.md", "/t/docs/raft2.md")
	want("LEADER number 1", "/t", "/t/docs/raft1.md")
	want("bloom membership", "/t/docs", "/t/docs/note00.txt", "/t/docs/note02.txt", "/t/docs/note04.txt", "/t/docs/note06.txt",
		"/t/docs/note08.txt", "/t/docs/note10.txt", "/t/docs/note12.txt", "/t/docs/note14.txt", "/t/docs/note16.txt", "/t/docs/note18.txt")
	want("leader", "/t/doc")
	// Text with the other conditions.
	var got map[string]string
	for try := 0; try < 100; try++ {
		if got = findAll(t, c, &rpc.FindRequest{Root: "/", Text: "note", Name: "note0?.txt"}); len(got) == 5 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(got) != 5 {
		t.Errorf("text note, name note0?.txt: %v", got)
	}

	// A text replaced, one removed; a file removed; a directory renamed.
	mustOK(t, via(c, "n2").call(rpc.MethodSetAttr, &rpc.SetAttrRequest{Path: "/t/docs/raft0.md", Text: ptr("gossip protocols")}, &rpc.SetAttrResponse{}), "setattr text")
	st, err := via(c, "n3").setattr(&rpc.SetAttrRequest{Path: "/t/docs/raft1.md", Text: ptr("")})
	if err != nil || st.Inode.HasText {
		t.Errorf("setattr without text: %+v %v", st, err)
	}
	mustOK(t, o.unlink("/t/docs/raft2.md"), "unlink")
	want("leader", "/")
	want("gossip", "/", "/t/docs/raft0.md")
	mustOK(t, o.rename("/t/docs", "/t/papers"), "rename")
	want("gossip", "/", "/t/papers/raft0.md")
	want("bloom note 4", "/t/papers", "/t/papers/note04.txt")

	for _, bad := range []*rpc.CreateRequest{
		{Path: "/t/bad1", Text: "\xff\xfe"},
		{Path: "/t/bad2", Text: strings.Repeat("x", rpc.MaxTextLen+1)},
		{Path: "/t/bad3", Symlink: "x", Text: "a link has no text"},
	} {
		if err := o.call(rpc.MethodCreate, bad, &rpc.CreateResponse{}); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("create %s with a bad text: %v, want invalid", bad.Path, err)
		}
	}
	if _, err := o.setattr(&rpc.SetAttrRequest{Path: "/t/papers", Text: ptr("a directory has no text")}); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("setattr text of a directory: %v", err)
	}
	for _, bad := range []rpc.FindRequest{
		{Shard: "n1", Root: "/", Text: "a", Query: "a"},
		{Shard: "n1", Root: "/", Text: "a", After: "x"},
	} {
		if err := o.call(rpc.MethodFind, &bad, &rpc.FindResponse{}); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("find %+v: %v, want invalid", bad, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }
