package transport

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"chatgraph/runtime"
)

// metrics are the server's Prometheus collectors, registered on one
// registry per Server (no globals, so tests stay independent).
type metrics struct {
	reg           *prometheus.Registry
	runs          *prometheus.CounterVec   // finished runs by status
	activeRuns    prometheus.Gauge         // runs bound here (queued or executing)
	nodeDuration  *prometheus.HistogramVec // node attempts by type and outcome
	activeStreams *prometheus.GaugeVec     // SSE responses, WebSocket connections and joins waiting
	cancelLatency prometheus.Histogram     // cancel call -> run_cancelled
	publishDelay  *prometheus.HistogramVec // an event's emit -> its publishing to subscribers, by kind
	publishDeltas prometheus.Observer      // publishDelay's token deltas
	publishOthers prometheus.Observer      // publishDelay's other events
	droppedSubs   *prometheus.CounterVec   // slow subscribers dropped
	wsFrames      prometheus.Counter       // WebSocket frames sent
	wsWrites      prometheus.Counter       // writes to WebSocket connections that carried them
	httpRequests  *prometheus.CounterVec
}

// NewRegistry returns a Prometheus registry with the process's
// collectors: the Go collector's defaults and the scheduler's metrics
// (goroutines started, scheduling latencies), and the process collector.
// Config.Metrics defaults to one.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsScheduler)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

func newMetrics(reg *prometheus.Registry) *metrics {
	if reg == nil {
		reg = NewRegistry()
	}
	m := &metrics{
		reg: reg,
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chatgraph_runs_total",
			Help: "Runs that ended, by final status."}, []string{"status"}),
		activeRuns: prometheus.NewGauge(prometheus.GaugeOpts{Name: "chatgraph_runs_active",
			Help: "Runs queued or executing in this process."}),
		nodeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "chatgraph_node_duration_seconds",
			Help: "Node execution time, by node type and outcome.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)},
			[]string{"type", "status"}),
		activeStreams: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "chatgraph_active_streams",
			Help: "Open event streams (and joins waiting for a run's end), by transport."}, []string{"transport"}),
		cancelLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "chatgraph_cancel_latency_seconds",
			Help: "Time from a cancel request to the run's run_cancelled event.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
		publishDelay: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "chatgraph_event_publish_delay_seconds",
			Help:    "Time from a run emitting an event to its publishing to subscribers, once the store holds it (commit-then-publish), by kind: delta (streamed text) or other.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 18)}, []string{"kind"}),
		droppedSubs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chatgraph_stream_dropped_total",
			Help: "Subscribers dropped or closed for being too slow, by transport."}, []string{"transport"}),
		wsFrames: prometheus.NewCounter(prometheus.CounterOpts{Name: "chatgraph_websocket_frames_total",
			Help: "Frames (events, acks, errors) sent on WebSocket connections."}),
		wsWrites: prometheus.NewCounter(prometheus.CounterOpts{Name: "chatgraph_websocket_writes_total",
			Help: "Writes to WebSocket connections that carried those frames: a connection writes the frames queued together with one write."}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chatgraph_http_requests_total",
			Help: "HTTP requests by route and status code."}, []string{"route", "code"}),
	}
	m.publishDeltas, m.publishOthers = m.publishDelay.WithLabelValues("delta"), m.publishDelay.WithLabelValues("other")
	reg.MustRegister(m.runs, m.activeRuns, m.nodeDuration, m.activeStreams, m.cancelLatency, m.publishDelay, m.droppedSubs, m.wsFrames, m.wsWrites, m.httpRequests)
	return m
}

// observeNode records a node's terminal event.
func (m *metrics) observeNode(typ string, ev runtime.Event) {
	var status string
	var ms float64
	switch d := ev.Data.(type) {
	case *runtime.NodeCompletedData:
		if d.Replayed {
			return
		}
		status, ms = "completed", d.DurationMs
	case *runtime.NodeFailedData:
		status, ms = "failed", d.DurationMs
	default:
		return
	}
	m.nodeDuration.WithLabelValues(typ, status).Observe(ms / 1000)
}

// StoreObserver returns a function that records the latency of the
// engine's run store calls in reg (chatgraph_store_operation_duration_seconds,
// by operation); pass it as the engine's store observer. The engine
// measures calls on the store itself, so every optional capability of the
// store stays visible to it.
func StoreObserver(reg prometheus.Registerer) func(op string, d time.Duration, err error) {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "chatgraph_store_operation_duration_seconds",
		Help: "Run store call latency, by operation.", Buckets: prometheus.ExponentialBuckets(0.00005, 4, 10)},
		[]string{"store", "op"})
	reg.MustRegister(h)
	return func(op string, d time.Duration, _ error) {
		h.WithLabelValues("runs", op).Observe(d.Seconds())
	}
}

// CommitObserver returns a function that records the engine's group
// commits in reg — chatgraph_group_commit_duration_seconds{stage}, the
// time from the committer taking the runs' writes to the store returning
// (written), to the commit being durable (durable) and to its events
// being handed to subscribers (published), and chatgraph_group_commit_runs,
// the runs each commit carried; pass it as the engine's
// runtime.Config.CommitObserver. A commit's published time is what its
// deltas waited once taken: where a stream's latency goes between the
// store's writer and its disk.
func CommitObserver(reg prometheus.Registerer) func(runtime.GroupCommit) {
	stages := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "chatgraph_group_commit_duration_seconds",
		Help:    "Time from the committer taking a group commit's writes to each stage: the store returned (written), the commit is durable (durable), its events went to subscribers (published).",
		Buckets: prometheus.ExponentialBuckets(0.00005, 2, 18)}, []string{"stage"})
	runs := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "chatgraph_group_commit_runs",
		Help: "Runs whose writes a group commit carried.", Buckets: prometheus.ExponentialBuckets(1, 2, 13)})
	reg.MustRegister(stages, runs)
	written, durable, published := stages.WithLabelValues("written"), stages.WithLabelValues("durable"), stages.WithLabelValues("published")
	return func(gc runtime.GroupCommit) {
		written.Observe(gc.Written.Seconds())
		durable.Observe(gc.Durable.Seconds())
		published.Observe(gc.Published.Seconds())
		runs.Observe(float64(gc.Runs))
	}
}
