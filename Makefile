# chatgraph: see README.md.
GO ?= go
STATICCHECK_VERSION ?= v0.8.2

.PHONY: run build test test-go bench bench-durable bench-server lint fmt-check fuzz tools mcp-test-servers

run: build
	./bin/chatgraph server

build: web
	$(GO) build -o bin/chatgraph ./cmd/server

# The UI is built first so the Go tests see the embedded build; the two
# test suites run one after the other (a UI rebuild rewrites web/dist/ui).
test: web
	$(MAKE) test-go
	$(MAKE) test-web
	$(MAKE) test-clients

test-go: mcp-test-servers fmt-check
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./runtime/

bench-durable:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 -benchtime 30x ./internal/durabench/

# The server from outside: the real binary on loopback, driven over
# HTTP/SSE and WebSocket (internal/loadbench; see docs/benchmarks.md).
bench-server: build
	$(GO) run ./internal/loadbench -bin bin/chatgraph

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeValidate -fuzztime 60s ./runtime
	$(GO) test -run '^$$' -fuzz FuzzStreamDecoder -fuzztime 60s ./nodes/llm
	$(GO) test -run '^$$' -fuzz FuzzDecodeChunk -fuzztime 60s ./runtime/store/sqlite
	$(GO) test -run '^$$' -fuzz FuzzNodeDeltaAppendJSON -fuzztime 30s ./nodes
	$(GO) test -run '^$$' -fuzz FuzzMessageValue -fuzztime 30s ./nodes
	$(GO) test -run '^$$' -fuzz FuzzChatInputValue -fuzztime 30s ./nodes
	$(GO) test -run '^$$' -fuzz FuzzDecodePage -fuzztime 30s ./runtime/store/sqlite
	$(GO) test -run '^$$' -fuzz FuzzAppendJSONValue -fuzztime 30s ./runtime
	$(GO) test -run '^$$' -fuzz FuzzDecodeClientFrame -fuzztime 60s ./transport
	$(GO) test -run '^$$' -fuzz FuzzRequestBodies -fuzztime 60s ./transport
	$(GO) test -run '^$$' -fuzz FuzzAdapterBodies -fuzztime 60s ./transport
	$(GO) test -run '^$$' -fuzz FuzzPreferredWait -fuzztime 20s ./transport
	$(GO) test -run '^$$' -fuzz FuzzFixJSONBEscapes -fuzztime 30s ./runtime/store/postgres

# The MCP servers the Go tests run for real (pinned in
# internal/mcptest/package-lock.json; see internal/mcptest).
mcp-test-servers: internal/mcptest/node_modules/.package-lock.json

internal/mcptest/node_modules/.package-lock.json: internal/mcptest/package-lock.json
	cd internal/mcptest && $(NPM) ci --no-audit --no-fund

tools:
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# fmt-check fails when gofmt would rewrite a Go file.
fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

lint: tools fmt-check
	$(GO) vet ./...
	$$($(GO) env GOPATH)/bin/staticcheck ./...

# ---- web UI (web/; see docs/web.md) -------------------------------------
# `make web` installs the npm packages when node_modules is missing or older
# than package-lock.json, and rebuilds web/dist/ui (embedded by the web Go
# package) only when a UI source or docs/openapi.json is newer than it.
NPM ?= npm
WEB_SOURCES := $(shell find web/src web/public -type f 2>/dev/null) web/index.html web/vite.config.ts \
	web/tsconfig.json web/package.json web/package-lock.json $(wildcard web/scripts/*) \
	$(wildcard docs/openapi.json transport/openapi.json)

.PHONY: web test-web test-web-unit test-web-browser

web: web/dist/ui/index.html

web/node_modules/.package-lock.json: web/package-lock.json
	cd web && $(NPM) ci --no-audit --no-fund

web/dist/ui/index.html: web/node_modules/.package-lock.json $(WEB_SOURCES)
	cd web && $(NPM) run build

# Vitest unit tests, then the Chromium tests against a real server
# (needs /usr/bin/chromium: apt-get install -y chromium).
test-web: test-web-unit test-web-browser

test-web-unit: web/node_modules/.package-lock.json
	cd web && $(NPM) run test:unit

test-web-browser: web
	cd web && $(NPM) run test:browser

# ---- the clients users already have (clients/; see docs/api.md) ----------
# @ag-ui/client and the openai npm SDK against a real server process.
.PHONY: test-clients

clients/node_modules/.package-lock.json: clients/package-lock.json
	cd clients && $(NPM) ci --no-audit --no-fund

test-clients: clients/node_modules/.package-lock.json
	cd clients && $(NPM) test
