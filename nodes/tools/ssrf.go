package tools

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// ErrAddressNotAllowed is returned when an allowed host name resolves to
// an address the http_request tool never dials.
var ErrAddressNotAllowed = fmt.Errorf("%w: address not allowed", ErrHostNotAllowed)

// publicAddress reports whether ip may be dialled: not loopback, link-local
// (169.254.0.0/16, where cloud metadata lives; fe80::/10), private
// (10/8, 172.16/12, 192.168/16, fc00::/7), shared (100.64/10),
// unspecified, multicast or otherwise reserved.
func publicAddress(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsPrivate() || ip.IsUnspecified() {
		return false
	}
	for _, p := range reservedPrefixes {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

var reservedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),  // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, broadcast
	netip.MustParsePrefix("64:ff9b::/96"),   // NAT64 (embeds any IPv4)
	netip.MustParsePrefix("64:ff9b:1::/48"), // local NAT64
	netip.MustParsePrefix("2002::/16"),      // 6to4 (embeds any IPv4)
	netip.MustParsePrefix("100::/64"),       // discard
	netip.MustParsePrefix("2001:db8::/32"),  // documentation
}

// dialControl refuses, after DNS resolution and right before connecting,
// every address publicAddress rejects: an allowed name that resolves (or
// is rebound) to a private address is never reached.
func dialControl(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrAddressNotAllowed, address)
	}
	if !publicAddress(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrAddressNotAllowed, ap.Addr())
	}
	return nil
}

// publicTransport is the http_request tool's default transport: no proxy
// from the environment (a proxy would dial on the tool's behalf, past the
// address check) and a dialer that reaches public addresses only.
func publicTransport() *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: dialControl}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}
