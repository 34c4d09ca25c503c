package transport

import (
	"context"
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
	activeStreams *prometheus.GaugeVec     // SSE responses and WebSocket connections
	cancelLatency prometheus.Histogram     // cancel call -> run_cancelled
	storeLatency  *prometheus.HistogramVec // store operations
	droppedSubs   *prometheus.CounterVec   // slow subscribers dropped
	httpRequests  *prometheus.CounterVec
}

func newMetrics(reg *prometheus.Registry) *metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
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
			Help: "Open event streams, by transport."}, []string{"transport"}),
		cancelLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "chatgraph_cancel_latency_seconds",
			Help: "Time from a cancel request to the run's run_cancelled event.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
		storeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "chatgraph_store_operation_duration_seconds",
			Help: "Store call latency, by store and operation.", Buckets: prometheus.ExponentialBuckets(0.00005, 4, 10)},
			[]string{"store", "op"}),
		droppedSubs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chatgraph_stream_dropped_total",
			Help: "Subscribers dropped or closed for being too slow, by transport."}, []string{"transport"}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chatgraph_http_requests_total",
			Help: "HTTP requests by route and status code."}, []string{"route", "code"}),
	}
	reg.MustRegister(m.runs, m.activeRuns, m.nodeDuration, m.activeStreams, m.cancelLatency, m.storeLatency, m.droppedSubs, m.httpRequests)
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

func (m *metrics) storeOp(store, op string, start time.Time) {
	m.storeLatency.WithLabelValues(store, op).Observe(time.Since(start).Seconds())
}

// timedStore measures every call of a runtime.Store. It also implements
// runtime.Leaser and runtime.Inspector by delegation, so capability checks
// on it behave as on the store it wraps (see leaser and inspector).
type timedStore struct {
	runtime.Store
	m *metrics
}

func (s *timedStore) CreateRun(ctx context.Context, r *runtime.RunRecord) error {
	defer s.m.storeOp("runs", "create_run", time.Now())
	return s.Store.CreateRun(ctx, r)
}

func (s *timedStore) GetRun(ctx context.Context, id string) (*runtime.RunRecord, error) {
	defer s.m.storeOp("runs", "get_run", time.Now())
	return s.Store.GetRun(ctx, id)
}

func (s *timedStore) UpdateRun(ctx context.Context, r *runtime.RunRecord) error {
	defer s.m.storeOp("runs", "update_run", time.Now())
	return s.Store.UpdateRun(ctx, r)
}

func (s *timedStore) SaveCheckpoint(ctx context.Context, cp *runtime.Checkpoint) error {
	defer s.m.storeOp("runs", "save_checkpoint", time.Now())
	return s.Store.SaveCheckpoint(ctx, cp)
}

func (s *timedStore) Checkpoints(ctx context.Context, runID string) ([]*runtime.Checkpoint, error) {
	defer s.m.storeOp("runs", "checkpoints", time.Now())
	return s.Store.Checkpoints(ctx, runID)
}

func (s *timedStore) AppendEvents(ctx context.Context, runID string, token int64, events []runtime.Event) error {
	defer s.m.storeOp("runs", "append_events", time.Now())
	return s.Store.AppendEvents(ctx, runID, token, events)
}

func (s *timedStore) Events(ctx context.Context, runID string, after int64, limit int) ([]runtime.Event, error) {
	defer s.m.storeOp("runs", "events", time.Now())
	return s.Store.Events(ctx, runID, after, limit)
}

// wrapStore returns st measured by m, keeping its optional capabilities.
func (m *metrics) wrapStore(st runtime.Store) runtime.Store {
	ts := &timedStore{Store: st, m: m}
	l, lok := st.(runtime.Leaser)
	i, iok := st.(runtime.Inspector)
	switch {
	case lok && iok:
		return struct {
			*timedStore
			runtime.Leaser
			runtime.Inspector
		}{ts, l, i}
	case lok:
		return struct {
			*timedStore
			runtime.Leaser
		}{ts, l}
	case iok:
		return struct {
			*timedStore
			runtime.Inspector
		}{ts, i}
	}
	return ts
}

// WriteBatches implements runtime.BatchWriter: in one call when the
// wrapped store batches, else write by write.
func (s *timedStore) WriteBatches(ctx context.Context, batches []runtime.WriteBatch) error {
	defer s.m.storeOp("runs", "write_batches", time.Now())
	if bw, ok := s.Store.(runtime.BatchWriter); ok {
		return bw.WriteBatches(ctx, batches)
	}
	for _, b := range batches {
		for _, cp := range b.Checkpoints {
			if err := s.Store.SaveCheckpoint(ctx, cp); err != nil {
				return err
			}
		}
		if len(b.Events) > 0 {
			if err := s.Store.AppendEvents(ctx, b.RunID, b.Token, b.Events); err != nil {
				return err
			}
		}
	}
	return nil
}

// Ping reports whether the wrapped store is reachable (when it can tell).
func (s *timedStore) Ping(ctx context.Context) error {
	if p, ok := s.Store.(interface{ Ping(context.Context) error }); ok {
		return p.Ping(ctx)
	}
	return nil
}
