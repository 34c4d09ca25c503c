package transport

// MaxBacklog is the frames a live topic keeps at most, for the tests of
// subscribers that start behind them.
const MaxBacklog = maxBacklog

// AppendTextFrame is appendTextFrame, for the floor benchmark's server,
// which frames its events as the server does.
func AppendTextFrame(b, p []byte) []byte { return appendTextFrame(b, p) }
