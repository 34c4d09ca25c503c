package ssetest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Stream is the open event stream of one run. Not safe for concurrent
// use; the caller closes it.
type Stream struct {
	body io.ReadCloser
	sc   *bufio.Scanner
}

// Open requests the events of run runID at the server base after seq
// after (Last-Event-ID; 0: from the first). An error is a request that
// failed or answered other than 200 (the status and body).
func Open(ctx context.Context, base, runID string, after int64) (*Stream, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/runs/"+runID+"/events", nil)
	if err != nil {
		return nil, err
	}
	if after > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET events: %s %s", resp.Status, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	return &Stream{body: resp.Body, sc: sc}, nil
}

// Next decodes the next event (its SSE data line) into v: io.EOF when
// the stream ended — the server ended it after a terminal event, or went
// away — and the decoding error for data that is not v's JSON.
func (s *Stream) Next(v any) error {
	for s.sc.Scan() {
		if data, ok := strings.CutPrefix(s.sc.Text(), "data: "); ok {
			return json.Unmarshal([]byte(data), v)
		}
	}
	return io.EOF
}

// Close ends the request.
func (s *Stream) Close() error { return s.body.Close() }
