package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestProbeHealth checks ghba health's exit codes and output against a
// fake node: 200 is ok, any other status and an unreachable node are
// unavailable (exit 5).
func TestProbeHealth(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/health":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"status":"starting"}`))
		case "/v1/health/live":
			_, _ = w.Write([]byte(`{"status":"live"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()

	tests := []struct {
		name     string
		url      string
		wantCode int
		wantOut  string
	}{
		{"serving", srv.URL + "/v1/health/live", exitOK, `{"status":"live"}`},
		{"not serving", srv.URL + "/v1/health", exitUnavail, `{"status":"starting"}`},
		{"unreachable", closedURL + "/v1/health", exitUnavail, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var out bytes.Buffer
			err := probeHealth(ctx, srv.Client(), tt.url, &out)
			if got := exitCode(err); got != tt.wantCode {
				t.Fatalf("exit code %d (err %v), want %d", got, err, tt.wantCode)
			}
			if got := strings.TrimSpace(out.String()); got != tt.wantOut {
				t.Fatalf("output %q, want %q", got, tt.wantOut)
			}
		})
	}
}

// TestHealthCmdUsage checks that a bad --http-addr is a usage error.
func TestHealthCmdUsage(t *testing.T) {
	root := newRootCmd()
	root.SetArgs([]string{"health", "--http-addr", "nohostport"})
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	if got := exitCode(root.Execute()); got != exitUsage {
		t.Fatalf("exit code %d, want %d", got, exitUsage)
	}
}
