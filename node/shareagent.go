package node

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"

	"github.com/ghba/ghba/rpc"
)

// Discovering shares (hba-application-modules, "finding network
// computers"; docs/design.md, "Discovering shares"). A machine that shares
// folders runs "ghba share-agent": it joins the cluster's Serf pool as a
// member of role "share" whose tags name its machine and its shares, one
// tag per share ("share.NAME" = the directory). Nodes ignore members of
// any other role than ghba for everything else (groups, shards, routing),
// and list the share members on Sources.Discover; an operator adopts a
// share as a source ("ghba source adopt"), which the agent then scans.
const (
	roleShare      = "share"  // the role of a share agent's member
	tagShareHost   = "mach"   // the machine name its sources use
	tagSharePrefix = "share." // + share name: the shared directory
	// shareMemberPrefix starts a share agent's member name, so that it
	// never takes a node id's name in the pool.
	shareMemberPrefix = "share:"
)

// Share is one shared folder a share agent announces.
type Share struct {
	Name string // a source name (rpc.ValidSourceName)
	Dir  string // an absolute path on the announcing machine
}

// ParseShare parses a share as given on the command line: NAME=DIR, or
// DIR alone, named after its last element.
func ParseShare(s string) (Share, error) {
	name, dir, ok := strings.Cut(s, "=")
	if !ok {
		dir, name = s, path.Base(path.Clean(s))
	}
	sh := Share{Name: name, Dir: path.Clean(dir)}
	switch {
	case !rpc.ValidSourceName(sh.Name):
		return Share{}, fmt.Errorf("%w: share %q: the name %q must be 1-64 of A-Z a-z 0-9 . _ - (NAME=DIR names it)", fs.ErrInvalid, s, sh.Name)
	case !path.IsAbs(sh.Dir):
		return Share{}, fmt.Errorf("%w: share %q: the directory must be absolute", fs.ErrInvalid, s)
	}
	return sh, nil
}

// shareTags returns the Serf tags announcing machine's shares, or an
// error if they do not fit Serf's limit or two shares share a name.
func shareTags(machine string, shares []Share) (map[string]string, error) {
	if machine == "" {
		return nil, fmt.Errorf("%w: no machine name", fs.ErrInvalid)
	}
	tags := map[string]string{tagRole: roleShare, tagShareHost: machine}
	for _, s := range shares {
		k := tagSharePrefix + s.Name
		if _, dup := tags[k]; dup {
			return nil, fmt.Errorf("%w: share name %q given twice", fs.ErrInvalid, s.Name)
		}
		tags[k] = s.Dir
	}
	if err := checkTags(tags); err != nil {
		return nil, fmt.Errorf("%w: %d shares are too many to announce (%v): run one agent per few shares, each with its own --machine", fs.ErrInvalid, len(shares), err)
	}
	return tags, nil
}

// discoveredMachine decodes a Serf member into the machine it announces;
// ok is false for any member that is not a share agent.
func discoveredMachine(m serf.Member) (rpc.DiscoveredMachine, bool) {
	if m.Tags[tagRole] != roleShare || m.Tags[tagShareHost] == "" {
		return rpc.DiscoveredMachine{}, false
	}
	d := rpc.DiscoveredMachine{
		Machine: m.Tags[tagShareHost],
		Addr:    net.JoinHostPort(m.Addr.String(), strconv.Itoa(int(m.Port))),
		Status:  serfStatus(m.Status),
		Shares:  []rpc.DiscoveredShare{},
	}
	for k, v := range m.Tags {
		if name, ok := strings.CutPrefix(k, tagSharePrefix); ok {
			d.Shares = append(d.Shares, rpc.DiscoveredShare{Name: name, Dir: v})
		}
	}
	slices.SortFunc(d.Shares, func(a, b rpc.DiscoveredShare) int { return strings.Compare(a.Name, b.Name) })
	return d, true
}

// ShareAgentConfig configures a share agent's Serf member.
type ShareAgentConfig struct {
	// Machine is the name sources adopted from it carry ("ghba scan
	// --machine" on this machine scans them).
	Machine string
	// Shares are the folders it announces.
	Shares []Share
	// BindAddr and BindPort are where its Serf member listens (TCP and
	// UDP; port 0: any free one); AdvertiseAddr, if set, is the address
	// nodes reach it at.
	BindAddr      string
	BindPort      int
	AdvertiseAddr string
	// Join are Serf addresses (host:port) of cluster nodes.
	Join []string
	// Encrypt is the cluster's gossip key (base64, the nodes' encrypt),
	// "" when the cluster gossips in the clear.
	Encrypt string
	// Logger receives the agent's and Serf's log lines.
	Logger *slog.Logger
}

// ShareAgent is a running share announcement: a Serf member of role
// share. Close leaves the pool.
type ShareAgent struct {
	serf *serf.Serf
	log  *slog.Logger
	join []string
}

// ErrNoCluster is returned by StartShareAgent when no node of the cluster
// could be joined.
var ErrNoCluster = errors.New("no cluster node answered")

// StartShareAgent starts the Serf member announcing cfg.Shares and joins
// the cluster through cfg.Join, retrying until ctx ends. It fails with
// ErrNoCluster wrapped if ctx ends first.
func StartShareAgent(ctx context.Context, cfg ShareAgentConfig) (*ShareAgent, error) {
	tags, err := shareTags(cfg.Machine, cfg.Shares)
	if err != nil {
		return nil, err
	}
	if len(cfg.Join) == 0 {
		return nil, fmt.Errorf("%w: no node address to join", fs.ErrInvalid)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	conf := serf.DefaultConfig()
	conf.Init()
	conf.NodeName = shareMemberPrefix + cfg.Machine
	conf.Tags = tags
	conf.Logger = newStdLogger(log, "serf")
	conf.LogOutput = nil
	conf.RejoinAfterLeave = true
	ml := memberlist.DefaultLANConfig()
	ml.Name = conf.NodeName
	ml.BindAddr = cfg.BindAddr
	ml.BindPort = cfg.BindPort
	ml.AdvertiseAddr = cfg.AdvertiseAddr
	ml.DeadNodeReclaimTime = deadNodeReclaimTime
	ml.Logger = newStdLogger(log, "memberlist")
	ml.LogOutput = nil
	if cfg.Encrypt != "" {
		key, err := base64.StdEncoding.DecodeString(cfg.Encrypt)
		if err != nil {
			return nil, fmt.Errorf("%w: the gossip key is not base64: %w", fs.ErrInvalid, err)
		}
		if ml.Keyring, err = memberlist.NewKeyring(nil, key); err != nil {
			return nil, fmt.Errorf("%w: the gossip key: %w", fs.ErrInvalid, err)
		}
	}
	conf.MemberlistConfig = ml
	s, err := serf.Create(conf)
	if err != nil {
		return nil, fmt.Errorf("share agent: serf on %s:%d: %w", cfg.BindAddr, cfg.BindPort, err)
	}
	a := &ShareAgent{serf: s, log: log, join: cfg.Join}
	if err := a.joinCluster(ctx); err != nil {
		a.shutdown()
		return nil, err
	}
	return a, nil
}

// joinCluster joins through any of a.join, retrying with a growing pause
// (up to 10 s) until one answers or ctx ends.
func (a *ShareAgent) joinCluster(ctx context.Context) error {
	pause := 250 * time.Millisecond
	for {
		n, err := a.serf.Join(a.join, true)
		if n > 0 {
			a.log.Info("share agent joined the cluster's gossip", "via", a.join, "members", a.serf.NumNodes())
			return nil
		}
		a.log.Warn("share agent: no node to join yet", "join", a.join, "err", err, "retry_in", pause)
		select {
		case <-ctx.Done():
			return fmt.Errorf("share agent: joining %s: %w (last: %v)", strings.Join(a.join, ","), ErrNoCluster, err)
		case <-time.After(pause):
		}
		pause = min(2*pause, 10*time.Second)
	}
}

// Addr is the address the agent's member listens on.
func (a *ShareAgent) Addr() string {
	m := a.serf.LocalMember()
	return net.JoinHostPort(m.Addr.String(), strconv.Itoa(int(m.Port)))
}

// Close leaves the pool, so that the nodes list the machine as left at
// once, and stops the member.
func (a *ShareAgent) Close() error {
	err := a.serf.Leave()
	if serr := a.shutdown(); err == nil {
		err = serr
	}
	return err
}

func (a *ShareAgent) shutdown() error { return a.serf.Shutdown() }

// discoverShares lists the share agents that n's Serf pool knows (alive or
// failed; those that left are gone), with the source each share is
// adopted as, if any, by machine name and directory.
func discoverShares(members []serf.Member, sources []rpc.Source) []rpc.DiscoveredMachine {
	out := []rpc.DiscoveredMachine{}
	for _, m := range members {
		d, ok := discoveredMachine(m)
		if !ok || m.Status == serf.StatusLeft {
			continue
		}
		for i := range d.Shares {
			sh := &d.Shares[i]
			for _, src := range sources {
				if src.Machine == d.Machine && path.Clean(src.Dir) == sh.Dir {
					sh.Source = src.Name
					break
				}
			}
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b rpc.DiscoveredMachine) int { return strings.Compare(a.Machine, b.Machine) })
	return out
}
