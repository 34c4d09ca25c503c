package transport

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// OpenAPI is the API's OpenAPI 3.1 document (a copy lives in
// docs/openapi.json; a test keeps the two equal and every route in it).
//
//go:embed openapi.json
var OpenAPI []byte

func (s *Server) openapi(c echo.Context) error {
	return c.Blob(http.StatusOK, "application/json", OpenAPI)
}
