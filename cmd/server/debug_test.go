package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// --debug-addr serves pprof on its own listener, on loopback unless a
// host is named; without it nothing listens.
func TestDebugListener(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	addr, stop, err := debugListener("", log)
	require.NoError(t, err)
	require.Empty(t, addr)
	stop()

	addr, stop, err = debugListener(":0", log)
	require.NoError(t, err)
	defer stop()
	host, _, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host, "no host means loopback")
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, _ := io.ReadAll(resp.Body)
	require.True(t, strings.Contains(string(body), "goroutine profile"), "a goroutine profile")

	_, _, err = debugListener("nope", log)
	require.Error(t, err)
}
