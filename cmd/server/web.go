package main

import "io/fs"

// webUI returns the built web UI to serve at /, or nil for the
// placeholder page (the web package is not part of this build yet).
func webUI() fs.FS { return nil }
