package raftmux

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// hdr builds a header byte by byte, for malformed ones.
func hdr(magic string, version, n byte, id string) []byte {
	return append(append([]byte(magic), version, n), id...)
}

func TestReadHeader(t *testing.T) {
	long := strings.Repeat("x", MaxIDLen)
	tests := []struct {
		name    string
		in      []byte
		wantID  string
		wantErr error
	}{
		{"good", appendHeader(nil, "group"), "group", nil},
		{"good shard", appendHeader(nil, "shard/n3"), "shard/n3", nil},
		{"longest id", appendHeader(nil, long), long, nil},
		{"bad magic", hdr("RMUY", Version, 5, "group"), "", errBadMagic},
		{"raft without a header", []byte{0, 0x85, 0xa4, 'T', 'e', 'r', 'm'}, "", errBadMagic},
		{"bad version", hdr(magic, Version+1, 5, "group"), "", errBadVersion},
		{"version 0", hdr(magic, 0, 5, "group"), "", errBadVersion},
		{"empty id", hdr(magic, Version, 0, ""), "", ErrInvalidID},
		{"too long id", hdr(magic, Version, MaxIDLen+1, long+"x"), "", ErrInvalidID},
		{"length 255", hdr(magic, Version, 255, ""), "", ErrInvalidID},
		{"space in id", hdr(magic, Version, 3, "a b"), "", ErrInvalidID},
		{"control byte in id", hdr(magic, Version, 3, "a\nb"), "", ErrInvalidID},
		{"non-ASCII id", hdr(magic, Version, 2, "é"), "", ErrInvalidID},
		{"empty", nil, "", errTruncated},
		{"cut in magic", []byte("RM"), "", errTruncated},
		{"cut before length", []byte("RMUX\x01"), "", errTruncated},
		{"cut in id", hdr(magic, Version, 5, "gro"), "", errTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := bytes.NewReader(append(tt.in, "raft bytes"...))
			if tt.wantErr != nil {
				r = bytes.NewReader(tt.in)
			}
			id, err := readHeader(r)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("readHeader = %q, %v; want an error wrapping %v", id, err, tt.wantErr)
				}
				return
			}
			if err != nil || id != tt.wantID {
				t.Fatalf("readHeader = %q, %v; want %q", id, err, tt.wantID)
			}
			rest, _ := io.ReadAll(r)
			if string(rest) != "raft bytes" {
				t.Fatalf("left %q after the header, want %q", rest, "raft bytes")
			}
		})
	}
}

func TestValidID(t *testing.T) {
	for _, id := range []string{"group", "shard/n3", "a", strings.Repeat("z", MaxIDLen), "~!"} {
		if err := validID(id); err != nil {
			t.Errorf("validID(%q) = %v", id, err)
		}
	}
	for _, id := range []string{"", " ", "a b", "tab\t", strings.Repeat("z", MaxIDLen+1), "\x7f", "ü"} {
		if err := validID(id); !errors.Is(err, ErrInvalidID) {
			t.Errorf("validID(%q) = %v, want ErrInvalidID", id, err)
		}
	}
}

// FuzzReadHeader: readHeader never panics, accepts only valid ids, reads
// exactly the header's bytes, and accepts exactly what appendHeader
// writes.
func FuzzReadHeader(f *testing.F) {
	f.Add(appendHeader(nil, "group"))
	f.Add(appendHeader([]byte{}, "shard/n3"))
	f.Add(hdr(magic, Version, MaxIDLen+1, strings.Repeat("x", MaxIDLen+1)))
	f.Add(hdr(magic, 2, 1, "g"))
	f.Add([]byte("RMUX"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		id, err := readHeader(r)
		if err != nil {
			if id != "" {
				t.Fatalf("id %q with error %v", id, err)
			}
			return
		}
		if err := validID(id); err != nil {
			t.Fatalf("accepted id %q: %v", id, err)
		}
		want := appendHeader(nil, id)
		if used := len(data) - r.Len(); used != len(want) || !bytes.Equal(data[:used], want) {
			t.Fatalf("read %d bytes %q for id %q, want the %d bytes %q", used, data[:used], id, len(want), want)
		}
	})
}
