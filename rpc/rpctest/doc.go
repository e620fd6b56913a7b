// Package rpctest holds the test helpers that ghba's packages share: a test
// logger, a wait helper, an address nothing listens on, FakeServer, a
// real rpc.Server that serves a small in-memory namespace and canned
// cluster answers, for testing clients (rpc/client's Client, the ghba CLI)
// without starting metadata servers, and the helpers of the tests that
// speak the wire protocol on a raw connection (FrameReader, EncodeBody,
// ParseResponse).
//
// Of ghba it imports only rpc and rpc's wire format (rpc/internal/wire),
// so any other package may use it from its tests (rpc's own tests that use
// it are in package rpc_test).
//
// A client test against a fake cluster of two servers, where every path's
// home is b:
//
//	func TestStat(t *testing.T) {
//		a := rpctest.StartFakeServer(t, rpctest.FakeOptions{ID: "a"})
//		b := rpctest.StartFakeServer(t, rpctest.FakeOptions{ID: "b", Share: a})
//		a.SetHome("b")
//		a.Put("/d", rpc.TypeDir)
//		c := client.New(client.Options{Addrs: []string{a.Addr()}, Logger: rpctest.Logger(t)})
//		defer c.Close()
//		if _, err := c.Stat(context.Background(), "/d"); err != nil {
//			t.Fatal(err)
//		}
//		// The answer named b as the home: the next call goes there.
//		if _, err := c.Create(context.Background(), &rpc.CreateRequest{Path: "/d/f"}); err != nil {
//			t.Fatal(err)
//		}
//		if a.TotalCalls() != 1 || b.TotalCalls() != 1 {
//			t.Fatalf("calls: a %v, b %v", a.Calls(), b.Calls())
//		}
//		rpctest.Eventually(t, 5*time.Second, "the file to be listed", func() error {
//			if !slices.Contains(a.Paths(), "/d/f") {
//				return errors.New("not yet")
//			}
//			return nil
//		})
//	}
package rpctest
