package node

import "context"

// newNamespace builds the namespace layer on n's store, Directory, client
// and RPC server (it registers its methods there).
func (n *Node) newNamespace() (namespaceLayer, error) {
	ns, err := NewNamespace(NamespaceOptions{
		NodeID:    n.cfg.NodeID,
		Store:     n.store,
		Client:    n.client,
		Directory: n.cluster,
		Config:    n.cfg,
		Logger:    n.log,
	})
	if err != nil {
		return nil, err
	}
	ns.Register(n.rpcSrv)
	return nsGlue{ns}, nil
}

// nsGlue adapts *Namespace to namespaceLayer.
type nsGlue struct{ *Namespace }

func (g nsGlue) Stop(context.Context) error {
	g.Namespace.Stop()
	return nil
}

// Drain moves every path homed here to other nodes.
func (g nsGlue) Drain(ctx context.Context) (int64, error) { return g.Namespace.Drain(ctx) }
