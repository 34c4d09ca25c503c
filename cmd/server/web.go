package main

import (
	"io/fs"

	"chatgraph/web"
)

// webUI is the browser UI served at /: the Vite build when `make web` ran
// before `go build`, else the web package's placeholder page.
func webUI() fs.FS { return web.Assets() }
