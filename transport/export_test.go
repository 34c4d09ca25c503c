package transport

// MaxBacklog is the frames a live topic keeps at most, for the tests of
// subscribers that start behind them.
const MaxBacklog = maxBacklog
