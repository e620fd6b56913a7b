package node

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"strings"
	"testing"

	"github.com/hashicorp/serf/serf"
)

func TestParseShare(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Share
		bad  bool
	}{
		{in: "docs=/srv/share/docs", want: Share{"docs", "/srv/share/docs"}},
		{in: "/srv/share/docs/", want: Share{"docs", "/srv/share/docs"}},
		{in: "h=/home/../home", want: Share{"h", "/home"}},
		{in: "relative/dir", bad: true},
		{in: "a/b=/x", bad: true},
		{in: "=/x", bad: true},
		{in: "/", bad: true}, // named "/"
	} {
		got, err := ParseShare(tc.in)
		if tc.bad {
			if !errors.Is(err, fs.ErrInvalid) {
				t.Errorf("ParseShare(%q) = %+v, %v; want ErrInvalid", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseShare(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// TestShareTags checks that the tags round-trip through discoveredMachine,
// that a duplicate name and more shares than Serf's tags hold are refused,
// and that members of another role are not machines.
func TestShareTags(t *testing.T) {
	tags, err := shareTags("ws1", []Share{{"home", "/home"}, {"docs", "/srv/docs"}})
	if err != nil {
		t.Fatal(err)
	}
	m := serf.Member{Name: "share:ws1", Addr: net.IPv4(10, 0, 0, 7), Port: 7946, Tags: tags, Status: serf.StatusFailed}
	d, ok := discoveredMachine(m)
	if !ok || d.Machine != "ws1" || d.Addr != "10.0.0.7:7946" || d.Status != statusFailed ||
		fmt.Sprint(d.Shares) != "[{docs /srv/docs } {home /home }]" {
		t.Errorf("discoveredMachine = %+v, %v", d, ok)
	}
	if _, ok := discoveredMachine(serf.Member{Tags: map[string]string{tagRole: roleGHBA}}); ok {
		t.Error("a ghba node is taken for a share agent")
	}
	if _, err := shareTags("ws1", []Share{{"a", "/a"}, {"a", "/b"}}); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("a duplicate name: %v", err)
	}
	var many []Share
	for i := range 20 {
		many = append(many, Share{fmt.Sprint("s", i), "/srv/" + strings.Repeat("x", 20)})
	}
	if _, err := shareTags("ws1", many); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("20 shares of 30 bytes: %v, want ErrInvalid (over Serf's 512 bytes)", err)
	}
}
