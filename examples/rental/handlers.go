package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime"
)

// Topics of the three classes.
const (
	topicOrders     = "orders"
	topicUsers      = "users"
	topicHeartbeats = "heartbeats"
)

var topics = []string{topicOrders, topicUsers, topicHeartbeats}

// handlers holds what the three classes share: the simulated work, the
// effects file, and an optional hook the demo counts with.
type handlers struct {
	work    time.Duration
	effects *os.File
	onDone  func(m *handoff.Message)
}

func newHandlers(work time.Duration, effectsPath string, onDone func(*handoff.Message)) (*handlers, error) {
	h := &handlers{work: work, onDone: onDone}
	if effectsPath != "" {
		f, err := os.OpenFile(effectsPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		h.effects = f
	}
	return h, nil
}

func (h *handlers) close() {
	if h.effects != nil {
		h.effects.Close()
	}
}

// classes is the service's class table: each class its own pool size.
func (h *handlers) classes() []runtime.Class {
	return []runtime.Class{
		{Name: "orders", Topics: []string{topicOrders}, Handler: h.handle, Workers: 8, QueueSize: 64, Ordered: true},
		{Name: "users", Topics: []string{topicUsers}, Handler: h.handle, Workers: 4, QueueSize: 32},
		{Name: "heartbeats", Topics: []string{topicHeartbeats}, Handler: h.handle, Workers: 16, QueueSize: 256},
	}
}

// handle simulates the work, honouring the stop, then records the effect
// with a single write.
func (h *handlers) handle(ctx context.Context, m *handoff.Message) error {
	if h.work > 0 {
		t := time.NewTimer(h.work)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		}
	}
	if h.effects != nil {
		line := make([]byte, 0, 64)
		line = append(line, m.Origin.Topic...)
		line = append(line, ' ')
		line = strconv.AppendInt(line, int64(m.Origin.Partition), 10)
		line = append(line, ' ')
		line = strconv.AppendInt(line, m.Origin.Offset, 10)
		line = append(line, ' ')
		line = append(line, m.Key...)
		line = append(line, '\n')
		if _, err := h.effects.Write(line); err != nil {
			return fmt.Errorf("rental: write effect of %s: %w", m.ID, err)
		}
	}
	if h.onDone != nil {
		h.onDone(m)
	}
	return nil
}
