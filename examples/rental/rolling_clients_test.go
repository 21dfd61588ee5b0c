package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// fakeGroupLog writes the runtime's group log lines with slog's text
// handler, as rental does, at chosen times.
type fakeGroupLog struct {
	buf bytes.Buffer
	h   slog.Handler
}

func newFakeGroupLog() *fakeGroupLog {
	l := &fakeGroupLog{}
	l.h = slog.NewTextHandler(&l.buf, nil)
	return l
}

var fakeT0 = time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)

// at is fakeT0 plus ms milliseconds.
func at(ms int) time.Time { return fakeT0.Add(time.Duration(ms) * time.Millisecond) }

func (l *fakeGroupLog) line(ms int, msg string, attrs ...any) {
	r := slog.NewRecord(at(ms), slog.LevelInfo, msg, 0)
	r.Add(attrs...)
	if err := l.h.Handle(context.Background(), r); err != nil {
		panic(err)
	}
}

func (l *fakeGroupLog) assigned(ms int, client string, gen int, parts ...string) {
	l.line(ms, "partitions assigned", "client", client, "generation", gen, "partitions", strings.Join(parts, ","))
}

func (l *fakeGroupLog) revoked(ms int, client string, gen int, lost bool, parts ...string) {
	l.line(ms, "partitions revoked", "client", client, "generation", gen, "partitions", strings.Join(parts, ","),
		"given_back", 3, "still_running", 0, "lost", lost)
}

// fakeRuns parses each of logs as a run of the instance at its index in
// instances.
func fakeRuns(t *testing.T, logs []*fakeGroupLog, instances ...int) []memberRun {
	t.Helper()
	var out []memberRun
	for i, l := range logs {
		evs, err := parseGroupEvents(l.buf.String())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, memberRun{instance: instances[i], events: evs})
	}
	return out
}

func TestParseGroupEvents(t *testing.T) {
	l := newFakeGroupLog()
	l.line(1, "joined group generation", "group", "rolling", "generation", 3, "partitions", 2)
	l.assigned(2, "kafka-go", 3, "orders/0", "users/1")
	l.line(3, "a message with spaces", "err", `quoted "value" = here`, "partitions", "x")
	l.revoked(4, "franz-go", 4, true)
	l.revoked(5, "franz-go", 5, false, "heartbeats/3")
	evs, err := parseGroupEvents(l.buf.String())
	if err != nil {
		t.Fatal(err)
	}
	want := []groupEvent{
		{at: at(2), client: "kafka-go", generation: 3, partitions: []string{"orders/0", "users/1"}},
		{at: at(4), revoked: true, client: "franz-go", generation: 4, lost: true},
		{at: at(5), revoked: true, client: "franz-go", generation: 5, partitions: []string{"heartbeats/3"}},
	}
	if len(evs) != len(want) {
		t.Fatalf("parsed %d events, want %d: %+v\nfrom\n%s", len(evs), len(want), evs, l.buf.String())
	}
	for i, ev := range evs {
		w := want[i]
		if !ev.at.Equal(w.at) || ev.revoked != w.revoked || ev.client != w.client || ev.generation != w.generation ||
			ev.lost != w.lost || strings.Join(ev.partitions, ",") != strings.Join(w.partitions, ",") {
			t.Errorf("event %d: %+v, want %+v", i, ev, w)
		}
	}
	if _, err := parseGroupEvents(`time=2026-12-01T15:00:00.000Z level=INFO msg="partitions assigned" generation=x partitions=a/1` + "\n"); err == nil {
		t.Error("a generation that is not a number parsed")
	}
}

// The two shapes of a restart of instance 0 (of 0, 1, 2, holding t/0-1,
// t/2-3, t/4-5): a static member gets its partitions back and nobody
// else revokes; eager rebalancing revokes everything twice and moves
// partitions.
func TestAnalyzeDeploy(t *testing.T) {
	start := func(client string) []*fakeGroupLog {
		logs := []*fakeGroupLog{newFakeGroupLog(), newFakeGroupLog(), newFakeGroupLog()}
		logs[0].assigned(1000, client, 3, "t/0", "t/1")
		logs[1].assigned(1000, client, 3, "t/2", "t/3")
		logs[2].assigned(1000, client, 3, "t/4", "t/5")
		return logs
	}
	restarts := []restart{{instance: 0, at: at(3000), old: 0, new: 3}, {instance: 1, at: at(5000), old: 1, new: 4}}

	t.Run("static", func(t *testing.T) {
		logs := append(start("franz-go"), newFakeGroupLog(), newFakeGroupLog())
		logs[0].revoked(3060, "franz-go", 3, false, "t/0", "t/1") // its own stop
		logs[3].assigned(4000, "franz-go", 4, "t/0", "t/1")
		logs[4].assigned(6000, "franz-go", 5, "t/2", "t/3")
		g := analyzeDeploy(fakeRuns(t, logs, 0, 1, 2, 0, 1), at(2000), restarts, at(8000))
		want := groupFigures{generations: 2, back: 2}
		if g != want {
			t.Errorf("got %+v, want %+v", g, want)
		}
	})
	t.Run("eager", func(t *testing.T) {
		logs := append(start("kafka-go"), newFakeGroupLog())
		// Instance 0 stops: the others revoke all and split its share.
		logs[0].revoked(3050, "kafka-go", 3, false, "t/0", "t/1")
		logs[1].revoked(3500, "kafka-go", 3, false, "t/2", "t/3")
		logs[2].revoked(3500, "kafka-go", 3, false, "t/4", "t/5")
		logs[1].assigned(4000, "kafka-go", 4, "t/0", "t/2", "t/3")
		logs[2].assigned(4000, "kafka-go", 4, "t/1", "t/4", "t/5")
		// It is back: everything is revoked again and shuffled.
		logs[1].revoked(4500, "kafka-go", 4, false, "t/0", "t/2", "t/3")
		logs[2].revoked(4500, "kafka-go", 4, true, "t/1", "t/4", "t/5")
		logs[3].assigned(4900, "kafka-go", 5, "t/4", "t/5")
		logs[1].assigned(4900, "kafka-go", 5, "t/0", "t/1")
		logs[2].assigned(4900, "kafka-go", 5, "t/2", "t/3")
		g := analyzeDeploy(fakeRuns(t, logs, 0, 1, 2, 0), at(2000), restarts[:1], at(6000))
		// t/0 0→1; t/1 0→2→1; t/2, t/3 1→2; t/4, t/5 2→0.
		want := groupFigures{generations: 2, ownerChanges: 7, moved: 6, revokedElsewhere: 10, revocationsElsewhere: 4, lostSessions: 1}
		if g != want {
			t.Errorf("got %+v, want %+v", g, want)
		}
	})
}

// The group's start in the CI run that failed TestProcessRollingDeployClients
// on franz-go (stop 19): instance 0 joined alone and took 6 of the 12
// partitions, the other two joined and got 3 each, and for 17ms, until
// instance 0 logged its revocation of orders/3 and users/3, the three
// held a cover of the 12. The deploy's first restart began in that
// window, and the next generation's owner changes were counted as the
// restarts'.
func TestGroupSettled(t *testing.T) {
	const total = 12
	logs := []*fakeGroupLog{newFakeGroupLog(), newFakeGroupLog(), newFakeGroupLog()}
	logs[0].assigned(625, "franz-go", 2, "heartbeats/0", "heartbeats/3", "orders/0", "orders/3", "users/0", "users/3")
	logs[1].assigned(1127, "franz-go", 3, "heartbeats/2", "orders/1", "users/1")
	logs[2].assigned(1127, "franz-go", 3, "heartbeats/1", "orders/2", "users/2")
	logs[0].revoked(1144, "franz-go", 2, false, "orders/3", "users/3")
	logs[1].assigned(1631, "franz-go", 4, "orders/3")
	logs[2].assigned(1631, "franz-go", 4, "users/3")
	runs := fakeRuns(t, logs, 0, 1, 2)
	heldAt := func(ms int) []map[string]bool {
		var out []map[string]bool
		for _, r := range runs {
			out = append(out, r.held(at(ms)))
		}
		return out
	}
	for _, c := range []struct {
		ms     int
		client string
		want   bool
	}{
		{1000, "franz-go", false}, // two members hold nothing yet
		{1130, "franz-go", false}, // the cover before the revocation: 6, 3, 3
		{1130, "kafka-go", true},  // range's 6, 3, 3 of 12 is final
		{1200, "franz-go", false}, // orders/3 and users/3 are nobody's
		{1700, "franz-go", true},  // 4, 4, 4
	} {
		if got := groupSettled(c.client, heldAt(c.ms), total); got != c.want {
			t.Errorf("%s at %dms (%v): settled %v, want %v", c.client, c.ms, heldAt(c.ms), got, c.want)
		}
	}
	twice := []map[string]bool{{"t/0": true, "t/1": true}, {"t/1": true, "t/2": true}, {"t/3": true}}
	if groupSettled("kafka-go", twice, 4) {
		t.Error("a partition held by two members counted as settled")
	}
}
