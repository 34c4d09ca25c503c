package web

import (
	"embed"
	"io/fs"
)

// dist holds the placeholder page (dist/index.html, committed) and, once
// `make web` has run, the built UI under dist/ui/ (not committed).
//
//go:embed all:dist
var dist embed.FS

// Assets returns the web UI to serve at /: the Vite build (dist/ui) when
// it was built before compiling, otherwise a one-page placeholder that
// says how to build it. The result is read-only and safe for concurrent
// use.
func Assets() fs.FS {
	if _, err := fs.Stat(dist, "dist/ui/index.html"); err == nil {
		return mustSub("dist/ui")
	}
	return mustSub("dist")
}

// Built reports whether the real UI (not the placeholder) is embedded.
func Built() bool {
	_, err := fs.Stat(dist, "dist/ui/index.html")
	return err == nil
}

func mustSub(dir string) fs.FS {
	sub, err := fs.Sub(dist, dir)
	if err != nil {
		panic(err) // dir is a constant inside the embedded tree
	}
	return sub
}
