package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	_ "time/tzdata" // time zones work without a system zoneinfo
)

var currentTimeSchema = json.RawMessage(`{"type":"object","properties":{"timezone":{"type":"string","description":"IANA time zone, e.g. Europe/Paris (default UTC)"}},"additionalProperties":false}`)

// CurrentTime returns the current_time tool: the time now as RFC 3339 in
// the requested IANA zone (UTC by default). now defaults to time.Now.
func CurrentTime(now func() time.Time) Tool {
	if now == nil {
		now = time.Now
	}
	return New(Spec{Name: "current_time", Description: "Returns the current date and time (RFC 3339) in a time zone.", Parameters: currentTimeSchema},
		func(_ context.Context, c Call) (string, error) {
			var a struct {
				Timezone string `json:"timezone"`
			}
			if err := DecodeArgs(c, &a); err != nil {
				return "", err
			}
			loc := time.UTC
			if a.Timezone != "" {
				l, err := time.LoadLocation(a.Timezone)
				if err != nil {
					return "", fmt.Errorf("%w: unknown time zone %q", ErrInvalidArguments, a.Timezone)
				}
				loc = l
			}
			return now().In(loc).Format(time.RFC3339), nil
		})
}
