package runtime

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

// TestNormalStopLogsNoWarning: a run that handles what it was given and
// stops gracefully (with a message waiting out a short backoff at the
// stop, which the drain waits for) logs nothing at Warn or above.
func TestNormalStopLogsNoWarning(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "calm")
	produced := b.produce(30)
	log, rec := recordLogs(t)
	// Messages ending in 7 fail their first attempt; the stop begins once
	// every other message is handled and those have failed once.
	var n atomic.Int64
	all := make(chan struct{})
	seen := func() {
		if n.Add(1) == int64(produced) {
			close(all)
		}
	}
	cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
		if m.Value[len(m.Value)-1] == '7' {
			if m.Attempt == 0 {
				seen()
				return errLogTest // retried after a short backoff
			}
			b.record(m)
			return nil
		}
		b.record(m)
		seen()
		return nil
	}, func(c *Class) { c.Retry = RetryPolicy{InitialBackoff: 50 * time.Millisecond} })
	cfg.Logger = log
	rt, wait := startNew(t, cfg)
	<-all
	rep := stopAndWait(t, rt, wait)
	if unique, _ := b.counts(); unique+rep.Snapshotted != produced {
		t.Errorf("handled %d + saved %d != produced %d", unique, rep.Snapshotted, produced)
	}
	for _, r := range rec.records(slog.LevelWarn) {
		t.Errorf("a normal stop logged %s %q %v", r.level, r.msg, r.attrs)
	}
}

var errLogTest = errorString("flaky")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestDrainLogSaysWhatWasLeft: the drain's log line counts what it left
// in the pools, unstarted, waiting out a backoff and running, which the
// hard stop then takes out and the snapshot saves; a drain that ended
// with only a message waiting out a long backoff says so too, although
// it did not run out of time. (It said work_left=false, and the next
// lines saved work.)
func TestDrainLogSaysWhatWasLeft(t *testing.T) {
	t.Parallel()
	drainLine := func(t *testing.T, rec *logRecorder) map[string]string {
		t.Helper()
		for _, r := range rec.records(slog.LevelInfo) {
			if r.msg == "stop phase done" && r.attrs["phase"] == "drain" {
				return r.attrs
			}
		}
		t.Fatal("no drain line logged")
		return nil
	}
	check := func(t *testing.T, line map[string]string, unstarted, waiting, running int) {
		t.Helper()
		for k, want := range map[string]int{"unstarted": unstarted, "waiting": waiting, "running": running} {
			if got := line[k]; got != strconv.Itoa(want) {
				t.Errorf("drain line %s=%q, want %d (line %v)", k, got, want, line)
			}
		}
		if _, ok := line["work_left"]; ok {
			t.Errorf("drain line still says work_left: %v", line)
		}
	}

	t.Run("ran out of time", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1, "orders")
		produced := 0
		for i, v := range []string{"backoff", "block", "q1", "q2", "q3"} {
			produced += b.produceValues("orders", "k"+strconv.Itoa(i), v)
		}
		failed, blocked := make(chan struct{}), make(chan struct{})
		cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
			switch string(m.Value) {
			case "backoff":
				close(failed)
				return errLogTest // waits out an hour's backoff
			case "block":
				close(blocked)
				<-ctx.Done() // running until the hard stop
				return ctx.Err()
			}
			b.record(m)
			return nil
		}, func(c *Class) {
			c.Workers = 1
			c.Retry = RetryPolicy{MaxAttempts: 5, InitialBackoff: time.Hour, MaxBackoff: time.Hour}
		})
		log, rec := recordLogs(t)
		cfg.Logger = log
		cfg.DrainTimeout = 100 * time.Millisecond
		cfg.HardStopGrace = time.Second
		rt, wait := startNew(t, cfg)
		<-failed
		<-blocked
		p := rt.classes.byName["orders"].pool
		waitFor(t, "three messages queued behind the running one", func() bool { return p.Stats().Queued == 3 })
		rep := shutdownAndWait(t, rt, wait)
		if !rep.DrainTimedOut || rep.Unstarted != 3 || rep.Waiting != 1 || rep.Interrupted != 1 || rep.Snapshotted != 5 {
			t.Errorf("report: drain timed out %v, unstarted %d, waiting %d, interrupted %d, snapshotted %d; want true, 3, 1, 1, 5",
				rep.DrainTimedOut, rep.Unstarted, rep.Waiting, rep.Interrupted, rep.Snapshotted)
		}
		if unique, _ := b.counts(); unique+rep.Snapshotted != produced {
			t.Errorf("handled %d + saved %d != produced %d", unique, rep.Snapshotted, produced)
		}
		check(t, drainLine(t, rec), 3, 1, 1)
	})

	t.Run("idle with a long backoff", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1, "orders")
		produced := b.produceValues("orders", "k", "backoff") + b.produceValues("orders", "j", "fine")
		failed := make(chan struct{})
		var fine atomic.Bool
		cfg := b.config(func(ctx context.Context, m *handoff.Message) error {
			if string(m.Value) == "backoff" {
				close(failed)
				return errLogTest
			}
			b.record(m)
			fine.Store(true)
			return nil
		}, func(c *Class) {
			c.Retry = RetryPolicy{MaxAttempts: 5, InitialBackoff: time.Hour, MaxBackoff: time.Hour}
		})
		log, rec := recordLogs(t)
		cfg.Logger = log
		cfg.DrainTimeout = time.Minute // the backoff is not waited for
		rt, wait := startNew(t, cfg)
		<-failed
		waitFor(t, "the other message handled", fine.Load)
		rep := shutdownAndWait(t, rt, wait)
		if rep.DrainTimedOut || rep.Waiting != 1 || rep.Snapshotted != 1 {
			t.Errorf("report: drain timed out %v, waiting %d, snapshotted %d; want false, 1, 1", rep.DrainTimedOut, rep.Waiting, rep.Snapshotted)
		}
		if unique, _ := b.counts(); unique+rep.Snapshotted != produced {
			t.Errorf("handled %d + saved %d != produced %d", unique, rep.Snapshotted, produced)
		}
		check(t, drainLine(t, rec), 0, 1, 0)
	})
}
