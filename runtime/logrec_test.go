package runtime

import (
	"context"
	"log/slog"
	"sync"
	"testing"
)

// logRecord is one record a logRecorder kept: level, message and its
// attributes (the logger's own With attributes included), as text.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// logRecorder is a slog handler that keeps every record, for tests that
// check what was logged; it also passes them to testLogger's handler.
type logRecorder struct {
	next  slog.Handler
	with  []slog.Attr
	mu    *sync.Mutex
	recs  *[]logRecord
	level slog.Level
}

func recordLogs(t *testing.T) (*slog.Logger, *logRecorder) {
	h := &logRecorder{next: testLogger(t).Handler(), mu: new(sync.Mutex), recs: new([]logRecord), level: slog.LevelDebug}
	return slog.New(h), h
}

func (h *logRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *logRecorder) Handle(ctx context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.with {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { rec.attrs[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	*h.recs = append(*h.recs, rec)
	h.mu.Unlock()
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.with = append(append([]slog.Attr(nil), h.with...), as...)
	c.next = h.next.WithAttrs(as)
	return &c
}

func (h *logRecorder) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}

// records returns the records kept so far with a level of at least min.
func (h *logRecorder) records(min slog.Level) []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []logRecord
	for _, r := range *h.recs {
		if r.level >= min {
			out = append(out, r)
		}
	}
	return out
}

// count returns how many records have message msg.
func (h *logRecorder) count(msg string) int {
	n := 0
	for _, r := range h.records(slog.LevelDebug) {
		if r.msg == msg {
			n++
		}
	}
	return n
}
