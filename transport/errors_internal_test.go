package transport

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"chatgraph/chat"
	"chatgraph/runtime"
)

// A request whose client went away is not logged as a server failure and
// gets no answer; the same error on a live request is a logged 500.
func TestErrorHandlerClientGone(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	e := echo.New()
	err := fmt.Errorf("begin turn: %w", context.Canceled)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := httptest.NewRecorder()
	s.errorHandler(err, e.NewContext(httptest.NewRequest(http.MethodPost, "/api/v1/chats/c/messages", nil).WithContext(ctx), rec))
	require.Empty(t, logs.String())
	require.Empty(t, rec.Body.String())

	rec = httptest.NewRecorder()
	s.errorHandler(err, e.NewContext(httptest.NewRequest(http.MethodPost, "/api/v1/chats/c/messages", nil), rec))
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.Contains(t, logs.String(), "request failed")
}

// A not-found or conflict error that the stores and the kernel passed up
// is answered with its text from the sentinel on: where it came from is
// not for the client. Text that starts with the sentinel, or does not
// hold it where a wrap would put it, is answered whole.
func TestClientTextDropsWhereTheErrorCameFrom(t *testing.T) {
	t.Parallel()
	deep := fmt.Errorf("runtime: run r_1: store: sqlite store: write batches: chat sqlite store: begin turn: %w",
		fmt.Errorf("%w: message m_1", chat.ErrNotFound))
	e := apiError(deep)
	require.Equal(t, http.StatusNotFound, e.Status)
	require.Equal(t, "not found: message m_1", e.Message)

	e = apiError(fmt.Errorf("runtime: resume r_2: %w", fmt.Errorf("%w: r_2 is completed", runtime.ErrRunNotResumable)))
	require.Equal(t, http.StatusConflict, e.Status)
	require.Equal(t, "run is not resumable: r_2 is completed", e.Message)

	e = apiError(fmt.Errorf("%w: graph g exists", chat.ErrConflict))
	require.Equal(t, "conflict: graph g exists", e.Message, "already the sentinel first")

	e = apiError(fmt.Errorf("%w: run r_3 (its tool was not found)", runtime.ErrRunNotFound))
	require.Equal(t, "run not found: run r_3 (its tool was not found)", e.Message, "the sentinel's own text inside the detail is left be")
}
