package tools

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func call(name, args string) Call {
	return Call{ID: "c1", Name: name, Arguments: json.RawMessage(args), IdempotencyKey: "idk_test"}
}

func TestCalculator(t *testing.T) {
	t.Parallel()
	calc, err := Calculator(0)
	require.NoError(t, err)
	for _, tc := range []struct{ expr, want, err string }{
		{"6*7", "42", ""},
		{"7/2", "3.5", ""},
		{"(2+3)*4 - 1", "19", ""},
		{"0.1+0.2", "0.3", ""},
		{"1/3", "0.333333333333", ""},
		{"2.5e3 + 1", "2501", ""},
		{"math.sqrt(81)", "9", ""},
		{"math.greatest(3, 9, 4)", "9", ""},
		{"10 % 4", "2", ""}, // modulo needs ints: falls back to the expression as written
		{"2 > 1", "true", ""},
		{"0x10 + 1", "17", ""},
		{"'a' + '1'", "a1", ""},
		{"1/0", "", "not a finite number"},
		{"", "", "empty"},
		{"6 *", "", "invalid arguments"},
		{"x + 1", "", "invalid arguments"},
		{strings.Repeat("1+", 1500) + "1", "", "longer than"},
	} {
		got, err := calc.Invoke(context.Background(), call("calculator", mustJSON(map[string]string{"expression": tc.expr})))
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.expr)
			continue
		}
		require.NoError(t, err, tc.expr)
		require.Equal(t, tc.want, got, tc.expr)
	}
	_, err = calc.Invoke(context.Background(), call("calculator", `{"expr":"1"}`))
	require.ErrorIs(t, err, ErrInvalidArguments)
}

func TestCalculatorCostLimit(t *testing.T) {
	t.Parallel()
	calc, err := Calculator(50)
	require.NoError(t, err)
	// A comprehension over a big list exceeds a small budget.
	_, err = calc.Invoke(context.Background(), call("calculator", `{"expression":"[1,2,3,4,5,6,7,8,9,10].map(x, [1,2,3,4,5,6,7,8,9,10].map(y, x*y)).size()"}`))
	require.ErrorContains(t, err, "costly")
}

func TestRealLiterals(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"6*7":          "6.0*7.0",
		"1.5+2":        "1.5+2.0",
		"1e3":          "1e3",
		"x2 + 3":       "x2 + 3.0",
		"'12' + \"3\"": "'12' + \"3\"",
		"0x1F":         "0x1F",
		"3u":           "3u",
		".5 + 1":       ".5 + 1.0",
		"'a\\'1' + 2":  "'a\\'1' + 2.0",
	} {
		require.Equal(t, want, realLiterals(in), in)
	}
}

func TestCurrentTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	ct := CurrentTime(func() time.Time { return now })
	got, err := ct.Invoke(context.Background(), call("current_time", `{}`))
	require.NoError(t, err)
	require.Equal(t, "2026-11-22T04:00:00Z", got)
	got, err = ct.Invoke(context.Background(), call("current_time", `{"timezone":"Europe/Paris"}`))
	require.NoError(t, err)
	require.Equal(t, "2026-11-22T05:00:00+01:00", got)
	_, err = ct.Invoke(context.Background(), call("current_time", `{"timezone":"Mars/Olympus"}`))
	require.ErrorIs(t, err, ErrInvalidArguments)
}

func TestHTTPRequest(t *testing.T) {
	t.Parallel()
	var gotKey, gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			io.WriteString(w, strings.Repeat("x", 5000))
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		case "/away":
			http.Redirect(w, r, "http://elsewhere.invalid/", http.StatusFound)
		case "/post":
			gotKey = r.Header.Get("Idempotency-Key")
			b, _ := io.ReadAll(r.Body)
			gotBody = string(b)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"ok":true}`)
		default:
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "hello "+r.Method)
		}
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	tool := HTTPRequest(HTTPConfig{AllowedHosts: []string{u.Hostname()}, MaxResponseBytes: 1000,
		Timeout: 200 * time.Millisecond, Transport: srv.Client().Transport})

	res := invokeHTTP(t, tool, `{"url":"`+srv.URL+`/hi"}`)
	require.Equal(t, HTTPResult{Status: 200, ContentType: "text/plain", Body: "hello GET"}, res)

	res = invokeHTTP(t, tool, `{"url":"`+srv.URL+`/post","method":"post","body":"{\"a\":1}"}`)
	require.Equal(t, 201, res.Status)
	require.Equal(t, `{"ok":true}`, res.Body)
	require.Equal(t, "idk_test", gotKey)
	require.Equal(t, `{"a":1}`, gotBody)

	res = invokeHTTP(t, tool, `{"url":"`+srv.URL+`/big"}`)
	require.True(t, res.Truncated)
	require.Len(t, res.Body, 1000)

	_, err := tool.Invoke(context.Background(), call("http_request", `{"url":"`+srv.URL+`/slow"}`))
	require.Error(t, err)
	require.True(t, errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Timeout"), err.Error())

	_, err = tool.Invoke(context.Background(), call("http_request", `{"url":"`+srv.URL+`/away"}`))
	require.ErrorIs(t, err, ErrHostNotAllowed)

	for _, bad := range []string{`{"url":"http://example.com/"}`, `{"url":"file:///etc/passwd"}`} {
		_, err = tool.Invoke(context.Background(), call("http_request", bad))
		require.ErrorIs(t, err, ErrHostNotAllowed, bad)
	}
	_, err = tool.Invoke(context.Background(), call("http_request", `{"url":"`+srv.URL+`","method":"DELETE"}`))
	require.ErrorIs(t, err, ErrInvalidArguments)

	// No allowlist: nothing is allowed.
	_, err = HTTPRequest(HTTPConfig{}).Invoke(context.Background(), call("http_request", `{"url":"`+srv.URL+`"}`))
	require.ErrorIs(t, err, ErrHostNotAllowed)
}

func TestHTTPAllowlist(t *testing.T) {
	t.Parallel()
	tool := HTTPRequest(HTTPConfig{AllowedHosts: []string{"api.example.com", "*.corp.test", "localhost:8080"}}).(*httpTool)
	for raw, ok := range map[string]bool{
		"https://api.example.com/x":     true,
		"http://API.example.com:81/":    true,
		"https://evil.api.example.com/": false,
		"https://a.corp.test/":          true,
		"https://corp.test/":            false,
		"https://x.corp.test.evil.com/": false,
		"http://localhost:8080/":        true,
		"http://localhost:8081/":        false,
		"http://localhost/":             false,
		"ftp://api.example.com/":        false,
	} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		require.Equal(t, ok, tool.allowed(u) == nil, raw)
	}
}

func invokeHTTP(t *testing.T, tool Tool, args string) HTTPResult {
	t.Helper()
	out, err := tool.Invoke(context.Background(), call("http_request", args))
	require.NoError(t, err)
	var res HTTPResult
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	return res
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	require.NoError(t, RegisterBuiltins(r, Config{}))
	require.Equal(t, []string{"calculator", "current_time", "http_request"}, r.Names())
	require.Error(t, RegisterBuiltins(r, Config{}), "duplicates")
	greet := New(Spec{Name: "greet", Description: "greets", Parameters: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, c Call) (string, error) {
			var a struct {
				Name string `json:"name"`
			}
			if err := DecodeArgs(c, &a); err != nil {
				return "", err
			}
			return "hello " + a.Name, nil
		})
	require.NoError(t, r.Register(greet))
	// Only tools declared safe are; http_request reaches other hosts.
	require.True(t, r.Safe("calculator"))
	require.True(t, r.Safe("current_time"))
	require.False(t, r.Safe("http_request"))
	require.False(t, r.Safe("greet"), "Register declares nothing safe")
	require.False(t, r.Safe("nope"))
	require.NoError(t, r.RegisterSafe(New(Spec{Name: "shout", Parameters: json.RawMessage(`{"type":"object"}`)}, nil)))
	require.True(t, r.Safe("shout"))
	require.Error(t, r.RegisterSafe(New(Spec{Name: "greet"}, nil)), "duplicates")
	require.False(t, r.Safe("greet"), "a refused registration declares nothing")
	g, ok := r.Lookup("greet")
	require.True(t, ok)
	out, err := g.Invoke(context.Background(), call("greet", `{"name":"ada"}`))
	require.NoError(t, err)
	require.Equal(t, "hello ada", out)
	require.Error(t, r.Register(New(Spec{Name: "bad name"}, nil)))
	require.Error(t, r.Register(New(Spec{Name: "x", Parameters: json.RawMessage(`[1]`)}, nil)))
	for _, s := range r.Specs() {
		require.True(t, json.Valid(s.Parameters), s.Name)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
