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

// pageOf reads ?limit and ?cursor.
func pageOf(c echo.Context) (chat.Page, error) {
	p := chat.Page{Limit: defaultPageLimit}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageLimit {
			return p, badRequest("limit must be a whole number from 1 to %d", maxPageLimit)
		}
		p.Limit = n
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

// setNext names the next page in a Link header when this one was full.
func setNext(c echo.Context, p chat.Page, got int, last chat.Cursor) {
	if got < p.Limit {
		return
	}
	q := url.Values{}
	for k, v := range c.QueryParams() {
		q[k] = v
	}
	q.Set("limit", strconv.Itoa(p.Limit))
	q.Set("cursor", encodeCursor(last))
	c.Response().Header().Set("Link", "<"+c.Request().URL.Path+"?"+q.Encode()+`>; rel="next"`)
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
