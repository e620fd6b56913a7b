package rpc

import "regexp"

var sourceName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ValidSourceName reports whether name may name a source: 1 to 64 of
// A-Z a-z 0-9 . _ -, and not "." or "..".
func ValidSourceName(name string) bool {
	return sourceName.MatchString(name) && name != "." && name != ".."
}
