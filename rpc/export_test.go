package rpc

// Internals for the external tests (package rpc_test), which are there so
// that they can use rpc/rpctest and rpc/client. Compiled into the test
// binary only.

// OpenConns returns the number of connections the server holds.
func (s *Server) OpenConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}
