package contents

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// keyPrefix starts the key of every block object.
const keyPrefix = "blocks/"

// ErrBadKey is wrapped by the errors ParseKey returns.
var ErrBadKey = errors.New("contents: not a block key")

// Key returns the object key of block r of inode ino:
// "blocks/<ino, 16 hex digits>/<block, decimal>-<gen, 16 hex digits>".
// All the objects of one inode share the prefix InodePrefix(ino).
func Key(ino uint64, r BlockRef) string {
	var a [len(keyPrefix) + 16 + 1 + 20 + 1 + 16]byte
	return string(appendKey(a[:0], ino, r))
}

// InodePrefix returns the key prefix of every object of inode ino.
func InodePrefix(ino uint64) string {
	var a [len(keyPrefix) + 16 + 1]byte
	b := append(a[:0], keyPrefix...)
	b = appendHex16(b, ino)
	return string(append(b, '/'))
}

func appendKey(b []byte, ino uint64, r BlockRef) []byte {
	b = append(b, keyPrefix...)
	b = appendHex16(b, ino)
	b = append(b, '/')
	b = strconv.AppendUint(b, r.Block, 10)
	b = append(b, '-')
	return appendHex16(b, r.Gen)
}

func appendHex16(b []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[(v>>uint(shift))&0xf])
	}
	return b
}

// ParseKey is the inverse of Key. It accepts exactly the keys Key returns.
func ParseKey(key string) (ino uint64, r BlockRef, err error) {
	bad := func(why string) (uint64, BlockRef, error) {
		return 0, BlockRef{}, fmt.Errorf("%w: %q: %s", ErrBadKey, key, why)
	}
	rest, ok := strings.CutPrefix(key, keyPrefix)
	if !ok {
		return bad("no " + keyPrefix + " prefix")
	}
	inoStr, rest, ok := strings.Cut(rest, "/")
	if !ok {
		return bad("no inode")
	}
	blockStr, genStr, ok := strings.Cut(rest, "-")
	if !ok {
		return bad("no generation")
	}
	if ino, ok = parseHex16(inoStr); !ok {
		return bad("inode is not 16 hex digits")
	}
	if r.Gen, ok = parseHex16(genStr); !ok {
		return bad("generation is not 16 hex digits")
	}
	if blockStr == "" || (blockStr[0] == '0' && len(blockStr) > 1) || blockStr[0] == '+' {
		return bad("block is not a decimal number")
	}
	if r.Block, err = strconv.ParseUint(blockStr, 10, 64); err != nil {
		return bad("block is not a decimal number")
	}
	return ino, r, nil
}

func parseHex16(s string) (uint64, bool) {
	if len(s) != 16 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			v = v<<4 | uint64(c-'0')
		case 'a' <= c && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}
