package transport

import (
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/labstack/echo/v4"
)

const placeholderUI = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>chatgraph</title>
<style>body{font-family:system-ui,sans-serif;max-width:40rem;margin:4rem auto;padding:0 1rem;line-height:1.5}code{background:#f3f3f3;padding:0 .25rem}</style>
</head><body>
<h1>chatgraph</h1>
<p>The server is running, but the web UI is not built into this binary.</p>
<p>The API is at <code>/api/v1</code> (<a href="/api/v1/openapi.json">OpenAPI</a>),
health at <a href="/healthz"><code>/healthz</code></a>, metrics at <a href="/metrics"><code>/metrics</code></a>.</p>
</body></html>
`

// ui serves the web UI (Config.UI) at /, falling back to index.html for
// client-side routes, or a placeholder page when no UI was built in. A
// query string that does not parse is 400 here too, as on the API.
func (s *Server) ui(c echo.Context) error {
	if err := checkQuery(c.Request()); err != nil {
		return err
	}
	p := strings.TrimPrefix(path.Clean("/"+c.Request().URL.Path), "/")
	if allow := s.allowedMethods(c.Request().URL.Path); allow != "" {
		c.Response().Header().Set("Allow", allow)
		return newError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "%s is not allowed here (allowed: %s)", c.Request().Method, allow)
	}
	if c.Request().Method != http.MethodGet && c.Request().Method != http.MethodHead || strings.HasPrefix(p, "api/") {
		if trimmed := strings.TrimRight(c.Request().URL.Path, "/"); trimmed != c.Request().URL.Path && s.allowedMethods(trimmed) != "" {
			return trailingSlash(c.Request().URL.Path)
		}
		return notFound("no such route")
	}
	if s.cfg.UI == nil {
		return c.HTML(http.StatusOK, placeholderUI)
	}
	if p == "" {
		p = "index.html"
	}
	if st, err := fs.Stat(s.cfg.UI, p); err != nil || st.IsDir() {
		if path.Ext(p) != "" {
			return notFound("no such file")
		}
		p = "index.html" // a client-side route
	}
	b, err := fs.ReadFile(s.cfg.UI, p)
	if err != nil {
		return notFound("no such file")
	}
	ct := mime.TypeByExtension(path.Ext(p))
	if ct == "" {
		ct = http.DetectContentType(b)
	}
	if p != "index.html" {
		c.Response().Header().Set("Cache-Control", "public, max-age=3600")
	}
	return c.Blob(http.StatusOK, ct, b)
}

// allowedMethods returns the methods routes of this exact path accept
// ("" when none): the router gives its own 404 handler priority over 405,
// so the not-found handler answers 405 itself. A trailing slash is part
// of the path (/api/v1/chats/ is no route of /api/v1/chats), and a
// parameter matches no empty segment (see pathIDs).
func (s *Server) allowedMethods(path string) string {
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	var methods []string
	for _, r := range s.echo.Routes() {
		if r.Method == "echo_route_not_found" || strings.Contains(r.Path, "*") {
			continue
		}
		rs := strings.Split(strings.Trim(r.Path, "/"), "/")
		if len(rs) != len(segs) || r.Path == "/" {
			continue
		}
		match := true
		for i := range rs {
			if param := strings.HasPrefix(rs[i], ":"); param && segs[i] == "" || !param && rs[i] != segs[i] {
				match = false
				break
			}
		}
		if match && !slices.Contains(methods, r.Method) {
			methods = append(methods, r.Method)
		}
	}
	sort.Strings(methods)
	return strings.Join(methods, ", ")
}

// pathIDs checks a matched route's address before its handler reads it.
// A path parameter that is no id answers 404: an empty one
// (/api/v1/runs//events), which the handlers would otherwise read as an
// id left out of a command, or one holding a slash, as the router matches
// the last parameter of /api/v1/graphs/g_1/. The router matches the path
// as sent (URL.RawPath when it has escapes), so each parameter is then
// unescaped, once for every route: ns%3Ag_1 is the id ns:g_1, as the web
// UI's encodeURIComponent sends it. An id parameter that does not unescape,
// or unescapes to what no id holds (a slash, a space: outside idChars), is
// 400 naming it. A query string that does not parse is 400 too (see
// checkQuery): url.ParseQuery would drop the bad pair, and the filter or
// limit with it.
func pathIDs(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		names, values := c.ParamNames(), c.ParamValues()
		unescaped := make([]string, len(values))
		for i, v := range values {
			switch name := names[i]; {
			case name == "*":
				unescaped[i] = v
				continue
			case v == "":
				return notFound("no such route: the path's %s is empty", name)
			case strings.HasSuffix(v, "/") && strings.HasSuffix(c.Request().URL.Path, "/"):
				return trailingSlash(c.Request().URL.Path)
			case strings.Contains(v, "/"):
				return notFound("no such route")
			}
			u, err := unescapeParam(names[i], v)
			if err != nil {
				return err
			}
			unescaped[i] = u
		}
		c.SetParamValues(unescaped...)
		if err := checkQuery(c.Request()); err != nil {
			return err
		}
		return next(c)
	}
}

// unescapeParam unescapes the path parameter name's value v. The id
// parameters (all but the OpenAI model, which may be a graph's name) must
// then be of idChars; dot-only ids pass, so that one saved before
// idPattern refused them can still be read and deleted by a client that
// sends it.
func unescapeParam(name, v string) (string, error) {
	u, err := url.PathUnescape(v)
	if err != nil {
		return "", badRequest("the path's %s %q is not percent-encoded right: %v", name, v, err)
	}
	if name != "model" && !idChars.MatchString(u) {
		return "", badRequest("the path's %s %q is no id: an id must match %s", name, u, idChars)
	}
	return u, nil
}

// checkQuery answers 400 for a query string that does not parse (a bad
// escape such as %ZZ, or a ';' separator): echo's QueryParam would read
// it as if the bad pair were not there.
func checkQuery(r *http.Request) error {
	if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
		return badRequest("the query string does not parse: %v", err)
	}
	return nil
}

// trailingSlash is the 404 of a route's path with a slash after it.
func trailingSlash(path string) *Error {
	return notFound("no such route: %s is %s without its trailing slash", path, strings.TrimRight(path, "/"))
}
