package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// debugListener serves net/http/pprof on addr, on its own listener apart
// from the API (no token, no rate limit: keep it on loopback). An address
// without a host (":6060") listens on loopback only; a host must be named
// to listen elsewhere. It returns the address it listens on and how to
// stop it; with addr "" it serves nothing.
func debugListener(addr string, log *slog.Logger) (string, func(), error) {
	if addr == "" {
		return "", func() {}, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", nil, err
	}
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("debug listener", "err", err)
		}
	}()
	log.Info("pprof listening", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}, nil
}
