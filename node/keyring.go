package node

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"

	"github.com/ghba/ghba/rpc"
)

// The gossip keyring (docs/design.md, "Security"). With encrypt set, the
// node keeps its Serf keyring in data_dir/serf/local.keyring, which Serf
// rewrites whenever ghba keyring changes the keys: from the second start
// on, that file, not encrypt, says which keys the node has (as Consul
// does), so a rotated key survives a restart.

// keyringPath is the node's keyring file.
func (n *Node) keyringPath() string { return filepath.Join(n.cfg.DataDir, "serf", "local.keyring") }

// gossipKeyring returns the keyring Serf starts with: the keyring file's
// keys (its first is the primary), or on the first start the encrypt key,
// which is then written to the file; nil without encryption.
func (n *Node) gossipKeyring() (*memberlist.Keyring, error) {
	key, err := n.cfg.GossipKey()
	if err != nil {
		return nil, err
	}
	path := n.keyringPath()
	raw, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if key == nil {
			return nil, nil
		}
		if err := writeKeyring(path, [][]byte{key}); err != nil {
			return nil, err
		}
		return memberlist.NewKeyring(nil, key)
	case err != nil:
		return nil, fmt.Errorf("keyring file: %w", err)
	}
	var encoded []string
	if err := json.Unmarshal(raw, &encoded); err != nil {
		return nil, fmt.Errorf("keyring file %s: %w", path, err)
	}
	if len(encoded) == 0 {
		return nil, fmt.Errorf("keyring file %s holds no key", path)
	}
	keys := make([][]byte, len(encoded))
	for i, e := range encoded {
		if keys[i], err = base64.StdEncoding.DecodeString(e); err != nil {
			return nil, fmt.Errorf("keyring file %s: key %d: %w", path, i, err)
		}
	}
	if key != nil && !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, key) }) {
		n.log.Warn("encrypt is not in the keyring file: the file's keys are used (ghba keyring changed them)", "file", path)
	}
	return memberlist.NewKeyring(keys, keys[0])
}

// writeKeyring writes keys (the primary first) as Serf does: a JSON list
// of base64 keys, mode 0600.
func writeKeyring(path string, keys [][]byte) error {
	encoded := make([]string, len(keys))
	for i, k := range keys {
		encoded[i] = base64.StdEncoding.EncodeToString(k)
	}
	b, err := json.MarshalIndent(encoded, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("keyring file: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("keyring file: %w", err)
	}
	return nil
}

// Keyring runs a keyring operation on every member through Serf's key
// manager (a cluster-wide query): list, install, use or remove key. The
// answer counts, per key, the members that hold it and use it as primary,
// and holds the members' error messages; an operation that some member
// failed is an error too (with the answer).
func (n *Node) Keyring(ctx context.Context, op, key string) (*rpc.KeyringResponse, error) {
	n.tagsMu.Lock()
	s := n.serf
	n.tagsMu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("%w: serf not started", rpc.ErrUnavailable)
	}
	if !s.EncryptionEnabled() {
		return nil, fmt.Errorf("%w: gossip encryption is off on %s (config encrypt)", fs.ErrInvalid, n.cfg.NodeID)
	}
	if op != rpc.KeyringList {
		if _, err := (&Config{Encrypt: key}).GossipKey(); err != nil || key == "" {
			return nil, fmt.Errorf("%w: key: %v", fs.ErrInvalid, cmpErr(err, "empty"))
		}
	}
	km := s.KeyManager()
	type result struct {
		r   *serf.KeyResponse
		err error
	}
	done := make(chan result, 1)
	go func() { // bounded by Serf's query timeout
		var r result
		switch op {
		case rpc.KeyringList:
			r.r, r.err = km.ListKeys()
		case rpc.KeyringInstall:
			r.r, r.err = km.InstallKey(key)
		case rpc.KeyringUse:
			r.r, r.err = km.UseKey(key)
		case rpc.KeyringRemove:
			r.r, r.err = km.RemoveKey(key)
		default:
			r.err = fmt.Errorf("%w: keyring operation %q (want list, install, use or remove)", fs.ErrInvalid, op)
		}
		done <- r
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("keyring %s: %w", op, ctx.Err())
	}
	if r.r == nil {
		return nil, r.err
	}
	resp := &rpc.KeyringResponse{Keys: r.r.Keys, PrimaryKeys: r.r.PrimaryKeys, Members: r.r.NumNodes,
		Answered: r.r.NumResp, Failed: r.r.NumErr, Messages: r.r.Messages}
	n.log.Info("keyring operation", "op", op, "members", resp.Members, "answered", resp.Answered, "failed", resp.Failed)
	if r.err != nil {
		var why []string
		for _, m := range slices.Sorted(maps.Keys(r.r.Messages)) {
			why = append(why, m+": "+r.r.Messages[m])
		}
		return resp, fmt.Errorf("keyring %s: %w (%s)", op, r.err, strings.Join(why, "; "))
	}
	return resp, nil
}

// cmpErr returns err's text, or def for a nil err.
func cmpErr(err error, def string) string {
	if err != nil {
		return err.Error()
	}
	return def
}
