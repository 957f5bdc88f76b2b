package harness

// SetKeepAlivesEnabled turns HTTP keep-alives of the server on or off.
// Off also closes the idle connections it holds, and every later request
// then comes on a connection of its own. Through the CONNECT proxy that
// is a tunnel of its own: a client's pooled connection cannot carry a
// request across a route the test has cut since (ConnectProxy.Cut holds
// new CONNECTs only, never tunnels already up).
func (s *TLSServer) SetKeepAlivesEnabled(on bool) { s.srv.SetKeepAlivesEnabled(on) }
