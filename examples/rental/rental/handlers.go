// Package rental is handoff's reference service: the class table and
// handlers of a rental platform's Kafka consumer, and the demo that runs it
// on an embedded broker. The command in the parent directory runs it.
package rental

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
	TopicOrders     = "orders"
	TopicUsers      = "users"
	TopicHeartbeats = "heartbeats"
)

// Topics returns the service's topics.
func Topics() []string { return []string{TopicOrders, TopicUsers, TopicHeartbeats} }

// Options configures the handlers.
type Options struct {
	// Work is the simulated work per message; it honours the stop.
	Work time.Duration
	// EffectsPath, if set, is a file that gets one line
	// "<topic> <partition> <offset> <key>" per handled message, each with
	// a single write.
	EffectsPath string
	// OnDone, if set, is called after each handled message.
	OnDone func(m *handoff.Message)
}

// Service holds what the three classes share: the simulated work, the
// effects file and the demo's hook.
type Service struct {
	work    time.Duration
	effects *os.File
	onDone  func(m *handoff.Message)
}

// New opens the effects file, if any. Close it with [Service.Close].
func New(opts Options) (*Service, error) {
	h := &Service{work: opts.Work, onDone: opts.OnDone}
	if opts.EffectsPath != "" {
		f, err := os.OpenFile(opts.EffectsPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("rental: open effects file: %w", err)
		}
		h.effects = f
	}
	return h, nil
}

// Close closes the effects file.
func (h *Service) Close() error {
	if h.effects != nil {
		return h.effects.Close()
	}
	return nil
}

// Classes is the service's class table: each class its own pool size.
func (h *Service) Classes() []runtime.Class {
	return []runtime.Class{
		{Name: "orders", Topics: []string{TopicOrders}, Handler: h.handle, Workers: 8, QueueSize: 64, Ordered: true},
		{Name: "users", Topics: []string{TopicUsers}, Handler: h.handle, Workers: 4, QueueSize: 32},
		{Name: "heartbeats", Topics: []string{TopicHeartbeats}, Handler: h.handle, Workers: 16, QueueSize: 256},
	}
}

// handle simulates the work, honouring the stop, then records the effect
// with a single write.
func (h *Service) handle(ctx context.Context, m *handoff.Message) error {
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
