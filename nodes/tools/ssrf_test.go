package tools

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// An allowed name that resolves to a private address is refused after DNS
// resolution, before any connection: the server behind it never sees the
// request.
func TestHTTPRequestRefusesPrivateAddressesOfAllowedNames(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1") // the environment's proxy is never used
	hit := make(chan struct{}, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hit <- struct{}{} }))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	// "localhost" is a name (resolved by DNS/hosts) on the allow-list.
	tool := HTTPRequest(HTTPConfig{AllowedHosts: []string{"localhost", "169.254.169.254", "*.nip.test", "10.1.2.3"}})
	for _, target := range []string{
		"http://localhost:" + u.Port() + "/",
		"http://169.254.169.254/latest/meta-data/",
		"http://10.1.2.3:" + u.Port() + "/",
	} {
		_, err := tool.Invoke(context.Background(), call("http_request", `{"url":"`+target+`"}`))
		require.ErrorIs(t, err, ErrAddressNotAllowed, target)
		require.ErrorIs(t, err, ErrHostNotAllowed, target)
	}
	require.Empty(t, hit, "no request reached the loopback server")
}

func TestPublicAddress(t *testing.T) {
	t.Parallel()
	for _, a := range []string{"127.0.0.1", "::1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "fe80::1",
		"fc00::1", "0.0.0.0", "::", "100.64.0.1", "::ffff:127.0.0.1", "::ffff:169.254.169.254", "224.0.0.1", "255.255.255.255",
		"64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1"} {
		require.False(t, publicAddress(netip.MustParseAddr(a)), a)
	}
	for _, a := range []string{"8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111"} {
		require.True(t, publicAddress(netip.MustParseAddr(a)), a)
	}
}
