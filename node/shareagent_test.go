package node_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ghba/ghba/node"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/rpctest"
)

// TestShareDiscovery starts two nodes that gossip encrypted and share
// agents beside them: one without the cluster's key is never listed (its
// join fails with ErrNoCluster), one with it is listed by both nodes with
// its shares, never as a member of the cluster; a source registered for
// one of its folders shows as that share's source, and once the agent
// leaves no node lists it.
func TestShareDiscovery(t *testing.T) {
	key := make([]byte, 32)
	rand.Read(key)
	enc := base64.StdEncoding.EncodeToString(key)
	log := rpctest.Logger(t)
	nodes := startGroups(t, log, []groupSpec{{"n1", "g"}, {"n2", "g"}}, func(_ int, c *node.Config) { c.Encrypt = enc })
	cl := client.New(client.Options{Addrs: nodeAddrs(nodes), HomeCacheSize: -1})
	t.Cleanup(func() { cl.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	join := []string{nodetest.SerfAddr(nodes[0].Config())}
	agentConfig := func(machine, encrypt string) node.ShareAgentConfig {
		return node.ShareAgentConfig{
			Machine: machine, BindAddr: "127.0.0.1", Join: join, Encrypt: encrypt, Logger: log,
			Shares: []node.Share{{Name: "docs", Dir: "/srv/docs"}, {Name: "home", Dir: "/home"}},
		}
	}

	jctx, jcancel := context.WithTimeout(ctx, 2*time.Second)
	defer jcancel()
	if a, err := node.StartShareAgent(jctx, agentConfig("stranger", "")); !errors.Is(err, node.ErrNoCluster) {
		if a != nil {
			a.Close()
		}
		t.Fatalf("an agent without the gossip key: %v, want ErrNoCluster", err)
	}
	a, err := node.StartShareAgent(ctx, agentConfig("ws1", enc))
	if err != nil {
		t.Fatalf("StartShareAgent: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			a.Close()
		}
	})

	discover := func(n *node.Node) ([]rpc.DiscoveredMachine, error) {
		c := client.New(client.Options{Addrs: []string{nodetest.RPCAddr(n.Config())}, HomeCacheSize: -1})
		defer c.Close()
		r, err := c.DiscoverShares(ctx)
		if err != nil {
			return nil, err
		}
		return r.Machines, nil
	}
	want := func(source string) []rpc.DiscoveredMachine {
		return []rpc.DiscoveredMachine{{Machine: "ws1", Addr: a.Addr(), Status: "alive", Shares: []rpc.DiscoveredShare{
			{Name: "docs", Dir: "/srv/docs", Source: source}, {Name: "home", Dir: "/home"}}}}
	}
	for _, n := range nodes {
		rpctest.Eventually(t, 30*time.Second, n.ID()+" lists ws1's shares", func() error {
			got, err := discover(n)
			if err != nil {
				return err
			}
			if !slices.EqualFunc(got, want(""), machineEqual) {
				return fmt.Errorf("discovered %+v, want %+v", got, want(""))
			}
			return nil
		})
	}
	ms, err := cl.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms.Members {
		if m.ID != "n1" && m.ID != "n2" {
			t.Errorf("the share agent is listed as a member: %+v", m)
		}
	}

	if _, err := cl.SourcePut(ctx, &rpc.Source{Name: "ws1-docs", Machine: "ws1", Dir: "/srv/docs", Dest: "/sources/ws1-docs", Every: "10m"}, true); err != nil {
		t.Fatalf("registering the share: %v", err)
	}
	if got, err := discover(nodes[1]); err != nil || !slices.EqualFunc(got, want("ws1-docs"), machineEqual) {
		t.Errorf("after adoption: %+v, %v; want %+v", got, err, want("ws1-docs"))
	}

	if err := a.Close(); err != nil {
		t.Errorf("leaving: %v", err)
	}
	closed = true
	rpctest.Eventually(t, 30*time.Second, "no node lists ws1 once it left", func() error {
		for _, n := range nodes {
			if got, err := discover(n); err != nil || len(got) != 0 {
				return fmt.Errorf("%s: %+v, %v", n.ID(), got, err)
			}
		}
		return nil
	})
}

func machineEqual(a, b rpc.DiscoveredMachine) bool {
	return a.Machine == b.Machine && a.Addr == b.Addr && a.Status == b.Status && slices.Equal(a.Shares, b.Shares)
}
