package transport

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
)

func preferContext(values ...string) echo.Context {
	req := httptest.NewRequest("POST", "/x", nil)
	for _, v := range values {
		req.Header.Add("Prefer", v)
	}
	return echo.New().NewContext(req, httptest.NewRecorder())
}

// Prefer: wait=N is read as RFC 7240 writes it: among other preferences,
// with parameters, quoted, in any of several headers; a wait that is no
// whole number of seconds over 0 is ignored, one over 600 s taken as 600.
func TestPreferredWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		headers []string
		want    time.Duration
	}{
		{[]string{"wait=10"}, 10 * time.Second},
		{[]string{"respond-async, wait=5"}, 5 * time.Second},
		{[]string{" Wait = 7 ; x=y"}, 7 * time.Second},
		{[]string{`wait="3"`}, 3 * time.Second},
		{[]string{"return=minimal", "wait=2"}, 2 * time.Second},
		{[]string{"wait=100000"}, 600 * time.Second},
		{[]string{"wait=2, wait=9"}, 2 * time.Second}, // the first one counts
		{nil, 0},
		{[]string{"respond-async"}, 0},
		{[]string{"wait"}, 0},
		{[]string{"wait="}, 0},
		{[]string{"wait=0"}, 0},
		{[]string{"wait=-3"}, 0},
		{[]string{"wait=+3"}, 0},
		{[]string{"wait=1.5"}, 0},
		{[]string{"wait=99999999999999999999"}, 0},
		{[]string{"waiting=4"}, 0},
	} {
		d, ok := preferredWait(preferContext(tc.headers...))
		require.Equal(t, tc.want, d, "%q", tc.headers)
		require.Equal(t, tc.want > 0, ok, "%q", tc.headers)
	}
}

// Whatever a Prefer header holds, reading it neither panics nor answers a
// wait outside 1 to 600 s.
func FuzzPreferredWait(f *testing.F) {
	for _, seed := range []string{"wait=10", "respond-async, wait=5", `wait="3"; a=b`, "wait=,", ",,;=", "wait=1e3"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := preferredWait(preferContext(v))
		if ok != (d > 0) || d < 0 || d > joinTimeoutMax*time.Second || d%time.Second != 0 {
			t.Fatalf("%q: wait %v, ok %v", v, d, ok)
		}
	})
}
