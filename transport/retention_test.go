package transport_test

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// The server's retention job deletes finished runs past the retention age.
func TestRetentionDeletesFinishedRuns(t *testing.T) {
	e := newEnv(t, func(c *transportConfig) {
		c.Retention = time.Millisecond
		c.RetentionInterval = 20 * time.Millisecond
	})
	_, chatID := e.newChat(basicGraph(`{}`))
	var ack map[string]any
	e.mustStatus(e.do("POST", "/api/v1/chats/"+chatID+"/messages", map[string]any{"content": "hi"}, &ack), http.StatusAccepted)
	runID := ack["runId"].(string)
	e.waitRunDone(runID)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.srv.Start(ctx)
	waitFor(t, "the finished run to be deleted", func() bool {
		return e.do("GET", "/api/v1/runs/"+runID, nil, nil).StatusCode == http.StatusNotFound
	})
}
