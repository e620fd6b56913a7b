package node

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestHCLogAdapter(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node_id", "n1")
	h := newHCLogAdapter(l, "raft").Named("transport").With("peer", "n2")
	h.Trace("hidden")
	h.Info("entering follower state", "term", 3)
	h.Error("failed to heartbeat", "error", "boom")
	if !h.IsDebug() || h.IsTrace() {
		t.Errorf("IsDebug %t IsTrace %t", h.IsDebug(), h.IsTrace())
	}
	h.StandardLogger(nil).Print("[WARN] from std logger")
	out := buf.String()
	for _, want := range []string{
		`level=INFO msg="entering follower state" node_id=n1 component=raft.transport peer=n2 term=3`,
		`level=ERROR msg="failed to heartbeat" node_id=n1 component=raft.transport peer=n2 error=boom`,
		`level=WARN msg="from std logger" node_id=n1 component=raft.transport`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hidden") {
		t.Errorf("trace shown at debug level:\n%s", out)
	}
}

func TestStdLogWriter(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	std := newStdLogger(l, "serf")
	std.Print("[DEBUG] memberlist: Stream connection from=127.0.0.1:1")
	std.Print("[INFO] serf: EventMemberJoin: n2 127.0.0.1")
	std.Print("[WARN] memberlist: Refuting a suspect message (from: n3)")
	std.Print("[ERR] memberlist: Push/Pull with n3 failed")
	std.Print("no level here")
	out := buf.String()
	for _, want := range []string{
		`level=INFO msg="EventMemberJoin: n2 127.0.0.1" component=serf`,
		`level=WARN msg="Refuting a suspect message (from: n3)" component=memberlist`,
		`level=ERROR msg="Push/Pull with n3 failed" component=memberlist`,
		`level=INFO msg="no level here" component=serf`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Stream connection") {
		t.Errorf("debug line shown at info level:\n%s", out)
	}
	if got := toSlogLevel(hclog.Trace); got != levelTrace {
		t.Errorf("trace level %v", got)
	}
}
