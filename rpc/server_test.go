package rpc

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestRegisterPanics(t *testing.T) {
	s := NewServer(ServerOptions{})
	h := func(ctx context.Context, r *struct{}) (*struct{}, error) { return nil, nil }
	Register(s, "A.B", h)
	for _, name := range []string{"A.B", "", strings.Repeat("x", MaxMethodLen+1)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", name)
				}
			}()
			Register(s, name, h)
		}()
	}
	if m := slices.Collect(maps.Keys(*s.handlers.Load())); len(m) != 1 || m[0] != "A.B" {
		t.Errorf("registered methods = %v", m)
	}
}
