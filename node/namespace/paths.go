package namespace

import (
	"fmt"
	"strings"

	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// Path limits (docs/design.md, "Guarantees"). They match the store's limits, so a path that
// passes CleanPath is always accepted by node/store.
const (
	// MaxPathLen is the longest path accepted, in bytes, as given by the
	// client (extra slashes count). It is the store's, past Linux's
	// PATH_MAX: a deep tree is reached through a mount by paths relative
	// to a directory. Paths longer than store.LegacyMaxPathLen need every
	// member to speak batch format 5.
	MaxPathLen = store.MaxPathLen
	// MaxNameLen is the longest path component accepted, in bytes.
	MaxNameLen = 255
)

// CleanPath validates a client-supplied path and returns its normalized
// form: absolute, no empty components ("//"), no "." components, no
// trailing "/". It rejects, with an error wrapping rpc.ErrInvalidPath that
// says why, the empty path, relative paths, paths containing a NUL byte,
// any ".." component (it could escape a directory, and resolving it
// lexically would be wrong when a component is not a directory), a
// component longer than MaxNameLen bytes and a path longer than MaxPathLen
// bytes. It does not allocate when p is already normalized.
func CleanPath(p string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("%w: empty path", rpc.ErrInvalidPath)
	case len(p) > MaxPathLen:
		return "", fmt.Errorf("%w: %w: path of %d bytes is longer than %d bytes", rpc.ErrInvalidPath, rpc.ErrNameTooLong, len(p), MaxPathLen)
	case p[0] != '/':
		return "", fmt.Errorf("%w: %s is relative (paths must start with /)", rpc.ErrInvalidPath, quotePath(p))
	}
	clean := true
	start := 1 // start of the current component
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			if p[i] == 0 {
				return "", fmt.Errorf("%w: %s contains a NUL byte", rpc.ErrInvalidPath, quotePath(p))
			}
			continue
		}
		name := p[start:i]
		switch {
		case name == "":
			if i < len(p) || len(p) > 1 { // "//" or a trailing "/"
				clean = false
			}
		case name == ".":
			clean = false
		case name == "..":
			return "", fmt.Errorf("%w: %s contains \"..\" (paths must not leave a directory; use the absolute path)", rpc.ErrInvalidPath, quotePath(p))
		case len(name) > MaxNameLen:
			return "", fmt.Errorf("%w: %w: %s has a component of %d bytes (limit %d)", rpc.ErrInvalidPath, rpc.ErrNameTooLong, quotePath(p), len(name), MaxNameLen)
		}
		start = i + 1
	}
	if clean {
		return p, nil
	}
	var b strings.Builder
	b.Grow(len(p))
	for _, name := range strings.Split(p, "/") {
		if name == "" || name == "." {
			continue
		}
		b.WriteByte('/')
		b.WriteString(name)
	}
	if b.Len() == 0 {
		return "/", nil
	}
	return b.String(), nil
}

// cleanPaths is CleanPath of two paths (a rename's or a link's ends).
func cleanPaths(a, b string) (string, string, error) {
	ca, err := CleanPath(a)
	if err != nil {
		return "", "", err
	}
	cb, err := CleanPath(b)
	if err != nil {
		return "", "", err
	}
	return ca, cb, nil
}

// quotePath quotes p for an error message, shortened if long.
func quotePath(p string) string {
	const max = 80
	if len(p) > max {
		return fmt.Sprintf("%q...", p[:max])
	}
	return fmt.Sprintf("%q", p)
}

// splitPath returns the parent directory and the last component of a
// normalized path other than "/".
func splitPath(p string) (dir, name string) {
	i := strings.LastIndexByte(p, '/')
	if i == 0 {
		return "/", p[1:]
	}
	return p[:i], p[i+1:]
}

// joinPath joins a normalized directory and a name.
func joinPath(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// isUnder reports whether p is root or inside root (both normalized).
func isUnder(p, root string) bool {
	if root == "/" {
		return true
	}
	return p == root || (len(p) > len(root) && p[len(root)] == '/' && p[:len(root)] == root)
}

// strictlyUnder reports whether p is inside root and not root itself.
func strictlyUnder(p, root string) bool { return p != root && isUnder(p, root) }

// directParent returns the directory holding a normalized path other
// than "/".
func directParent(p string) string {
	dir, _ := splitPath(p)
	return dir
}

// containsSlashOrNUL reports whether s contains a '/' or a NUL byte (it
// cannot be one path component).
func containsSlashOrNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' || s[i] == 0 {
			return true
		}
	}
	return false
}
