package transport

import (
	"encoding/base64"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"chatgraph/chat"
)

// List routes answer one page: ?limit= (default and most: below) items
// after ?cursor=, the opaque position the previous page's Link header
// named. A full page carries `Link: <…>; rel="next"`.
const (
	defaultPageLimit = 100
	maxPageLimit     = 1000
)

// pageOf reads ?limit and ?cursor of a list of graphs or chats.
func pageOf(c echo.Context) (chat.Page, error) {
	limit, err := limitOf(c)
	p := chat.Page{Limit: limit}
	if err != nil {
		return p, err
	}
	if v := c.QueryParam("cursor"); v != "" {
		cur, ok := decodeCursor(v)
		if !ok {
			return p, badRequest("cursor is not one this server gave")
		}
		p.After = cur
	}
	return p, nil
}

// seqPageOf reads ?limit and ?cursor of a list of messages: the cursor is
// the last message's place in creation order (0: from the first).
func seqPageOf(c echo.Context) (limit int, after int64, err error) {
	if limit, err = limitOf(c); err != nil {
		return 0, 0, err
	}
	if v := c.QueryParam("cursor"); v != "" {
		var ok bool
		if after, ok = decodeSeqCursor(v); !ok {
			return 0, 0, badRequest("cursor is not one this server gave")
		}
	}
	return limit, after, nil
}

// limitOf reads ?limit (default defaultPageLimit).
func limitOf(c echo.Context) (int, error) {
	n, ok := queryInt(c, "limit", defaultPageLimit, maxPageLimit)
	if !ok {
		return defaultPageLimit, badRequest("limit must be a whole number from 1 to %d", maxPageLimit)
	}
	return n, nil
}

// queryInt reads query parameter name as a whole number from 1 to most:
// def when the request has none, ok false when it holds anything else.
func queryInt(c echo.Context, name string, def, most int) (n int, ok bool) {
	v := c.QueryParam(name)
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, false
	}
	return n, true
}

// setNext names the next page in a Link header when this one was full.
func setNext(c echo.Context, p chat.Page, got int, last chat.Cursor) {
	if got >= p.Limit {
		setNextLink(c, p.Limit, encodeCursor(last))
	}
}

// setNextLink sets `Link: <this route?…&limit=&cursor=>; rel="next"`,
// keeping the request's other query parameters.
func setNextLink(c echo.Context, limit int, cursor string) {
	q := url.Values{}
	for k, v := range c.QueryParams() {
		q[k] = v
	}
	setLink(c, c.Request().URL.Path, q, limit, cursor)
}

// setLink sets `Link: <path?q&limit=&cursor=>; rel="next"`.
func setLink(c echo.Context, path string, q url.Values, limit int, cursor string) {
	q.Set("limit", strconv.Itoa(limit))
	q.Set("cursor", cursor)
	c.Response().Header().Set("Link", "<"+path+"?"+q.Encode()+`>; rel="next"`)
}

func encodeCursor(c chat.Cursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.At.UnixNano(), 10) + "." + c.ID))
}

func decodeCursor(s string) (chat.Cursor, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return chat.Cursor{}, false
	}
	at, id, ok := strings.Cut(string(b), ".")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || id == "" {
		return chat.Cursor{}, false
	}
	return chat.Cursor{At: time.Unix(0, n).UTC(), ID: id}, true
}

// encodeSeqCursor is the cursor after the message at place seq; its
// encoding differs from encodeCursor's, so neither list takes the
// other's cursor.
func encodeSeqCursor(seq int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("m" + strconv.FormatInt(seq, 10)))
}

func decodeSeqCursor(s string) (int64, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return 0, false
	}
	v, ok := strings.CutPrefix(string(b), "m")
	n, err := strconv.ParseInt(v, 10, 64)
	return n, ok && err == nil && n > 0
}
