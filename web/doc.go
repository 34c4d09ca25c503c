// Package web embeds the chatgraph browser UI (graph editor, chat and run
// inspector; React + TypeScript + Vite, sources in this folder) so the
// server binary serves it at / with no files beside it:
//
//	srv, err := transport.New(transport.Config{UI: web.Assets(), ...})
//
// `make web` (npm ci when needed, then vite build) writes the UI to
// dist/ui/, which is embedded at the next `go build`. A fresh clone
// compiles without Node: Assets then serves the committed placeholder
// page, dist/index.html, which says how to build the UI. See docs/web.md.
package web
