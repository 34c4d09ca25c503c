package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Join says when a node with several incoming flow edges runs. Either way
// the node waits until every incoming edge is resolved (taken or dead), so
// its inputs never depend on timing.
type Join string

// Joins. The empty value means JoinAll.
const (
	// JoinAll runs the node when every incoming edge was taken; one dead edge skips it.
	JoinAll Join = "all"
	// JoinAny runs the node when at least one incoming edge was taken.
	JoinAny Join = "any"
)

// Backoff shapes the delay between retries.
type Backoff string

// Backoffs. The empty value means BackoffExponential.
const (
	BackoffFixed       Backoff = "fixed"
	BackoffLinear      Backoff = "linear"
	BackoffExponential Backoff = "exponential"
)

// RetryPolicy is a node's `retry` option.
type RetryPolicy struct {
	// MaxAttempts counts the first attempt; 1 (the default) never retries.
	MaxAttempts int `json:"maxAttempts,omitempty"`
	// InitialDelayMs is the delay before the first retry (default 0).
	InitialDelayMs int64 `json:"initialDelayMs,omitempty"`
	// MaxDelayMs clamps every delay (0: no clamp).
	MaxDelayMs int64   `json:"maxDelayMs,omitempty"`
	Backoff    Backoff `json:"backoff,omitempty"`
	// Jitter in [0,1] shortens each delay by a random fraction of up to
	// Jitter; JSON true means 0.5.
	Jitter Jitter `json:"jitter,omitempty"`
	// RetryableErrors lists the error codes that retry; empty retries any
	// error. Interrupts and cancellations never retry.
	RetryableErrors []string `json:"retryableErrors,omitempty"`
}

// Jitter is a fraction in [0,1]; it decodes from a number or a bool.
type Jitter float64

// UnmarshalJSON accepts a number or a bool (true = 0.5).
func (j *Jitter) UnmarshalJSON(b []byte) error {
	switch string(bytes.TrimSpace(b)) {
	case "true":
		*j = 0.5
		return nil
	case "false", "null":
		*j = 0
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return errors.New("jitter must be a number in [0,1] or a bool")
	}
	*j = Jitter(f)
	return nil
}

// Delay returns the wait before retry number retry (1 = the wait after the
// first failed attempt). rnd is a uniform random number in [0,1).
func (p *RetryPolicy) Delay(retry int, rnd float64) time.Duration {
	if retry < 1 {
		retry = 1
	}
	base := float64(p.InitialDelayMs)
	var d float64
	switch p.Backoff {
	case BackoffFixed:
		d = base
	case BackoffLinear:
		d = base * float64(retry)
	default:
		d = base * math.Pow(2, float64(retry-1))
	}
	if p.MaxDelayMs > 0 && d > float64(p.MaxDelayMs) {
		d = float64(p.MaxDelayMs)
	}
	if d > float64(math.MaxInt64/int64(time.Millisecond)) {
		d = float64(math.MaxInt64 / int64(time.Millisecond))
	}
	if p.Jitter > 0 {
		d -= d * float64(p.Jitter) * rnd
	}
	return time.Duration(d * float64(time.Millisecond))
}

// Retryable reports whether an error with this code may be retried.
func (p *RetryPolicy) Retryable(code string) bool {
	if len(p.RetryableErrors) == 0 {
		return true
	}
	for _, c := range p.RetryableErrors {
		if c == code {
			return true
		}
	}
	return false
}

// NodeOptions are the options in any node's data the runtime interprets.
type NodeOptions struct {
	Retry RetryPolicy `json:"retry"`
	// TimeoutMs bounds each attempt (0: no bound).
	TimeoutMs       int64  `json:"timeoutMs,omitempty"`
	Join            Join   `json:"join,omitempty"`
	Effect          Effect `json:"effect,omitempty"`
	ContinueOnError bool   `json:"continueOnError,omitempty"`
	// Priority orders ready nodes: higher first (default 0).
	Priority int `json:"priority,omitempty"`
}

// maxRetryAttempts bounds retry.maxAttempts so a typo cannot loop forever.
const maxRetryAttempts = 100

// ParseNodeOptions reads the generic options out of node data. Each problem
// is a *FieldError naming the field.
func ParseNodeOptions(data json.RawMessage) (NodeOptions, []*FieldError) {
	return parseNodeOptions(data, EffectPure)
}

func parseNodeOptions(data json.RawMessage, defaultEffect Effect) (NodeOptions, []*FieldError) {
	o, errs := decodeNodeOptions(data)
	if o.Effect == "" {
		o.Effect = defaultEffect
	}
	return o, errs
}

func decodeNodeOptions(data json.RawMessage) (o NodeOptions, errs []*FieldError) {
	if len(bytes.TrimSpace(data)) == 0 || string(bytes.TrimSpace(data)) == "null" {
		o.normalize()
		return o, nil
	}
	if err := json.Unmarshal(data, &o); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return o, []*FieldError{{Field: te.Field, Message: fmt.Sprintf("expected %s, got JSON %s", te.Type, te.Value)}}
		}
		var se *json.SyntaxError
		if errors.As(err, &se) || bytes.TrimSpace(data)[0] != '{' {
			return o, []*FieldError{{Field: "", Message: "data must be a JSON object"}}
		}
		return o, []*FieldError{{Field: "", Message: err.Error()}}
	}
	bad := func(f, m string) { errs = append(errs, &FieldError{Field: f, Message: m}) }
	r := &o.Retry
	if r.MaxAttempts < 0 || r.MaxAttempts > maxRetryAttempts {
		bad("retry.maxAttempts", fmt.Sprintf("must be between 1 and %d", maxRetryAttempts))
	}
	if r.InitialDelayMs < 0 {
		bad("retry.initialDelayMs", "must not be negative")
	}
	if r.MaxDelayMs < 0 {
		bad("retry.maxDelayMs", "must not be negative")
	}
	switch r.Backoff {
	case "", BackoffFixed, BackoffLinear, BackoffExponential:
	default:
		bad("retry.backoff", "must be fixed, linear or exponential")
	}
	if r.Jitter < 0 || r.Jitter > 1 || math.IsNaN(float64(r.Jitter)) {
		bad("retry.jitter", "must be in [0,1]")
	}
	if o.TimeoutMs < 0 {
		bad("timeoutMs", "must not be negative")
	}
	switch o.Join {
	case "", JoinAll, JoinAny:
	default:
		bad("join", "must be all or any")
	}
	switch o.Effect {
	case "", EffectPure, EffectRead, EffectWrite, EffectExternal, EffectHuman:
	default:
		bad("effect", "must be pure, read, write, external or human")
	}
	o.normalize()
	return o, errs
}

func (o *NodeOptions) normalize() {
	if o.Retry.MaxAttempts == 0 {
		o.Retry.MaxAttempts = 1
	}
	if o.Join == "" {
		o.Join = JoinAll
	}
}
