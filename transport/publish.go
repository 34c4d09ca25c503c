package transport

import (
	"strings"
	"time"

	"chatgraph/chat"
	"chatgraph/runtime"
)

var _ chat.GroupPublisher = (*Server)(nil)

// PublishGroup implements chat.GroupPublisher: the subscriptions that get
// events of a group commit are woken once all its events are published,
// so each WebSocket connection writes its frames of the commit together.
func (s *Server) PublishGroup(publish func()) { s.hub.group(publish) }

// RunOpened implements chat.Publisher: the run's events after afterSeq
// will come through the hub.
func (s *Server) RunOpened(run *chat.LiveRun, afterSeq int64) {
	s.hub.open(run.ID, afterSeq)
	s.metrics.activeRuns.Inc()
}

// RunClosed implements chat.Publisher.
func (s *Server) RunClosed(run *chat.LiveRun) {
	s.hub.close(run.ID)
	s.mu.Lock()
	delete(s.cancelAt, run.ID)
	s.mu.Unlock()
	s.metrics.activeRuns.Dec()
}

// RunEvent implements chat.Publisher: one event of a local run goes to
// the hub, the relay and the metrics.
func (s *Server) RunEvent(run *chat.LiveRun, ev runtime.Event) {
	f, err := encodeEvent(ev)
	if err != nil {
		s.log.Error("encoding an event", "run", ev.RunID, "type", ev.Type, "err", err)
		f = frame{Seq: ev.Seq, Type: ev.Type, JSON: mustJSON(runtime.Event{Seq: ev.Seq, RunID: ev.RunID, ChatID: ev.ChatID,
			Type: ev.Type, NodeID: ev.NodeID, Attempt: ev.Attempt, Time: ev.Time})}
	}
	// Metrics first: a client that has read the event may read them next.
	if ev.Type == eventNodeDelta {
		s.metrics.publishDeltas.Observe(time.Since(ev.Time).Seconds())
	} else {
		s.metrics.publishOthers.Observe(time.Since(ev.Time).Seconds())
	}
	switch ev.Type {
	case runtime.EventNodeCompleted, runtime.EventNodeFailed:
		s.metrics.observeNode(run.NodeType(ev.NodeID), ev)
		s.log.Debug("node ended", "run", ev.RunID, "node", ev.NodeID, "type", ev.Type)
	case runtime.EventRunStarted:
		s.log.Info("run started", "run", ev.RunID, "chat", ev.ChatID)
	case runtime.EventRunCompleted, runtime.EventRunFailed, runtime.EventRunCancelled, runtime.EventRunInterrupted:
		status := strings.TrimPrefix(string(ev.Type), "run_")
		s.metrics.runs.WithLabelValues(status).Inc()
		if ev.Type == runtime.EventRunCancelled {
			s.mu.Lock()
			at, ok := s.cancelAt[ev.RunID]
			s.mu.Unlock()
			if ok {
				s.metrics.cancelLatency.Observe(time.Since(at).Seconds())
			}
		}
		s.log.Info("run ended", "run", ev.RunID, "chat", ev.ChatID, "status", status, "lastSeq", ev.Seq)
	}
	s.hub.publish(ev.RunID, f)
	if s.cfg.Relay != nil {
		s.cfg.Relay.Publish(ev.RunID, f.Seq, string(f.Type), f.JSON)
	}
}

// noteCancel records when a cancel reached runs of this process (cancel
// latency metric).
func (s *Server) noteCancel(ids []string) {
	now := time.Now()
	s.mu.Lock()
	for _, id := range ids {
		if s.svc.Live(id) != nil {
			if _, seen := s.cancelAt[id]; !seen {
				s.cancelAt[id] = now
			}
		}
	}
	s.mu.Unlock()
}
