package runtime

import (
	"log/slog"
	"sync"
	"time"
)

// Logging of failures that repeat while a broker is unreachable: the Kafka
// clients' consumer group and readers retry on their own, several times a second,
// and log each failure; so do the fetch loop and the keeper. A line
// repeated with backoff says as much and leaves room for the rest.

// Bounds of logBackoff's gaps.
const (
	logGapMin = time.Second
	logGapMax = time.Minute
)

// logBackoff lets a repeated log line through with backoff: the first at
// once, the next after logGapMin, then 2, 4, … up to logGapMax apart,
// each saying how many were suppressed since the last. A line quiet for
// twice its gap starts over. Lines are told apart by a key (kafka-go's
// format string, or our message): the same failure of 30 partitions is
// one line. Safe for concurrent use.
type logBackoff struct {
	now   func() time.Time // time.Now; a test's clock otherwise
	mu    sync.Mutex
	lines map[string]*backoffLine
}

type backoffLine struct {
	next       time.Time // the earliest the next one may go through
	last       time.Time // the last seen, logged or not
	gap        time.Duration
	suppressed int
}

func newLogBackoff() *logBackoff {
	return &logBackoff{now: time.Now, lines: map[string]*backoffLine{}}
}

// allow reports whether a line with key may be logged now, and how many
// were suppressed since the last one logged.
func (b *logBackoff) allow(key string) (ok bool, suppressed int) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.lines[key]
	if l == nil || now.Sub(l.last) >= 2*l.gap {
		b.lines[key] = &backoffLine{next: now.Add(logGapMin), last: now, gap: logGapMin}
		return true, 0
	}
	l.last = now
	if now.Before(l.next) {
		l.suppressed++
		return false, 0
	}
	l.gap = min(2*l.gap, logGapMax)
	l.next = now.Add(l.gap)
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}

// warn logs msg at Warn through the backoff for key.
func (b *logBackoff) warn(log *slog.Logger, key, msg string, args ...any) {
	ok, suppressed := b.allow(key)
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	log.Warn(msg, args...)
}
