package chaos

import (
	"os"
	"strconv"
	"testing"
)

func TestOwnerGone(t *testing.T) {
	me := strconv.Itoa(os.Getpid())
	ns := pidNamespace()
	for _, c := range []struct {
		prefix, owner string
		want          bool
	}{
		{"ghbachaos-" + me + "-abcd", "", false},       // this run, by its prefix
		{"ghbachaos-1-abcd", ns + "/" + me, false},     // this run, by its label
		{"ghbachaos-1-abcd", "other/999999999", false}, // another pid namespace
		{"ghbachaos-999999999-abcd", "", true},         // an older run, gone
		{"x", ns + "/999999999", true},                 // gone, by its label
		{"ghbachaos-1-abcd", ns + "/1", true},          // pid 1 is no test binary
		{"something-else", "", false},                  // not ours
	} {
		if got, why := ownerGone(c.prefix, c.owner); got != c.want {
			t.Errorf("ownerGone(%q, %q) = %v (%s), want %v", c.prefix, c.owner, got, why, c.want)
		}
	}
	if got := prefixOf("ghbachaos-12966-bf33-n6"); got != "ghbachaos-12966-bf33" {
		t.Errorf("prefixOf = %q", got)
	}
}
