package harness

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FreeLoopbackAddr hands out loopback ports below the kernel's ephemeral
// range, free when handed out and never the same one twice.
func TestFreeLoopbackAddr_belowTheEphemeralRangeAndOnce(t *testing.T) {
	_, ephemeral := portsBelowEphemeral()
	seen := map[string]bool{}
	for range 50 {
		addr, err := FreeLoopbackAddr()
		require.NoError(t, err)
		host, port, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		assert.Equal(t, "127.0.0.1", host)
		p, err := strconv.Atoi(port)
		require.NoError(t, err)
		assert.Less(t, p, ephemeral, "a port an outgoing connection may take")
		assert.False(t, seen[addr], "handed out twice: %s", addr)
		seen[addr] = true
		l, err := net.Listen("tcp", addr)
		require.NoError(t, err, "not free")
		require.NoError(t, l.Close())
	}
}
