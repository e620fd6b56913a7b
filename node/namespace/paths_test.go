package namespace

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/ghba/ghba/rpc"
)

func TestCleanPath(t *testing.T) {
	long := strings.Repeat("a", MaxNameLen)
	tooLong := strings.Repeat("a", MaxNameLen+1)
	deep := strings.Repeat("/abcdefg", MaxPathLen/8) // exactly MaxPathLen bytes
	tests := []struct {
		in, want string
		bad      string // substring of the error; "" = valid
	}{
		{"/", "/", ""},
		{"/a", "/a", ""},
		{"/a/b/c", "/a/b/c", ""},
		{"//", "/", ""},
		{"///a//b///", "/a/b", ""},
		{"/a/", "/a", ""},
		{"/a/./b/.", "/a/b", ""},
		{"/./", "/", ""},
		{"/a b/ü/…", "/a b/ü/…", ""},
		{"/" + long, "/" + long, ""},
		{deep, deep, ""},
		{"/a/.../b", "/a/.../b", ""},
		{"/.hidden/..x", "/.hidden/..x", ""},
		{"", "", "empty"},
		{"a", "", "relative"},
		{"a/b", "", "relative"},
		{"./a", "", "relative"},
		{"../a", "", "relative"},
		{"/..", "", `".."`},
		{"/../etc", "", `".."`},
		{"/a/../b", "", `".."`},
		{"/a/b/..", "", `".."`},
		{"/a/..//", "", `".."`},
		{"/a\x00b", "", "NUL"},
		{"/\x00", "", "NUL"},
		{"/" + tooLong, "", "component of 256 bytes"},
		{"/a/" + tooLong + "/b", "", "component of 256 bytes"},
		{deep + "/", "", "longer than 32768"},
		{"/" + strings.Repeat("a/", 17000), "", "longer than 32768"},
	}
	for _, tt := range tests {
		got, err := CleanPath(tt.in)
		name := tt.in
		if len(name) > 40 {
			name = name[:40] + "..."
		}
		if tt.bad == "" {
			if err != nil || got != tt.want {
				t.Errorf("CleanPath(%q) = %q, %v; want %q", name, got, err, tt.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("CleanPath(%q) = %q, want an error containing %q", name, got, tt.bad)
			continue
		}
		if !errors.Is(err, rpc.ErrInvalidPath) || !errors.Is(err, rpc.ErrInvalidPath) {
			t.Errorf("CleanPath(%q): %v does not match rpc.ErrInvalidPath", name, err)
		}
		if long := strings.Contains(tt.bad, "longer than") || strings.Contains(tt.bad, "component of"); long != errors.Is(err, rpc.ErrNameTooLong) {
			t.Errorf("CleanPath(%q): %v matches rpc.ErrNameTooLong: %v, want %v", name, err, !long, long)
		}
		if !strings.Contains(err.Error(), tt.bad) {
			t.Errorf("CleanPath(%q): %q does not say %q", name, err, tt.bad)
		}
		if len(err.Error()) > 300 {
			t.Errorf("CleanPath(%q): error of %d bytes", name, len(err.Error()))
		}
	}
	// The code travels: a remote ErrInvalidPath also matches fs.ErrInvalid.
	err := rpc.CodeInvalidPath.Err("x")
	if !errors.Is(err, rpc.ErrInvalidPath) || !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("remote invalid path error does not match")
	}
}

func TestCleanPathNoAllocWhenClean(t *testing.T) {
	p := "/a/b/c/some-file.txt"
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := CleanPath(p); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("CleanPath of a clean path allocates %v times", allocs)
	}
}

func TestPathHelpers(t *testing.T) {
	for _, tt := range []struct{ p, dir, name string }{
		{"/a", "/", "a"}, {"/a/b", "/a", "b"}, {"/a/b/c", "/a/b", "c"},
	} {
		if d, n := splitPath(tt.p); d != tt.dir || n != tt.name {
			t.Errorf("splitPath(%q) = %q, %q", tt.p, d, n)
		}
		if j := joinPath(tt.dir, tt.name); j != tt.p {
			t.Errorf("joinPath(%q, %q) = %q", tt.dir, tt.name, j)
		}
	}
	for _, tt := range []struct {
		p, root string
		want    bool
	}{
		{"/a", "/", true}, {"/", "/", true}, {"/a", "/a", true}, {"/a/b", "/a", true},
		{"/ab", "/a", false}, {"/a b", "/a", false}, {"/b", "/a", false}, {"/", "/a", false},
	} {
		if got := isUnder(tt.p, tt.root); got != tt.want {
			t.Errorf("isUnder(%q, %q) = %v", tt.p, tt.root, got)
		}
	}
	if got := Rebase("/a/b/c", "/a/b", "/x"); got != "/x/c" {
		t.Errorf("rebase = %q", got)
	}
}
