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
