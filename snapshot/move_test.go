package snapshot

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

func openTestState(t *testing.T) *State {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "state.db"), Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testRecord(id string) Record {
	return Record{Message: handoff.Message{ID: id, Class: "c", Key: []byte("k-" + id)}, Reason: "unstarted", SavedAt: time.Unix(1700000000, 0)}
}

// wantCounts fails t unless the buckets hold want (pending, dead,
// delayed, parked).
func wantCounts(t *testing.T, s *State, step string, pending, dead, delayed, parked int) {
	t.Helper()
	c, err := s.Counts()
	if err != nil {
		t.Fatal(err)
	}
	got := [4]int{c[BucketPending], c[BucketDead], c[BucketDelayed], c[BucketParked]}
	if want := [4]int{pending, dead, delayed, parked}; got != want {
		t.Fatalf("%s: pending, dead, delayed, parked = %v, want %v", step, got, want)
	}
}

// TestMoves checks that each move deletes its source and saves the
// message in one call, and that a move whose Check fails writes nothing.
func TestMoves(t *testing.T) {
	s := openTestState(t)
	recs, keys, kafka, err := s.SaveStop(StopSnapshot{Fresh: []StopRecord{
		{Record: testRecord("a"), Kafka: true}, {Record: testRecord("b")}, {Record: testRecord("c")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || len(keys) != 3 || !kafka[0] || kafka[1] {
		t.Fatalf("SaveStop returned %d records, %d keys, kafka %v", len(recs), len(keys), kafka)
	}
	wantCounts(t, s, "saved", 3, 0, 0, 0)

	pending := func(k uint64) Source { return Source{From: FromPending, Key: k} }
	if err := s.MoveToDead(Move{From: pending(keys[0])}, testRecord("a")); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, s, "a to dead", 2, 1, 0, 0)

	injected := errors.New("injected")
	err = s.MoveToDead(Move{From: pending(keys[1]), Alone: true, Check: func() error { return injected }}, testRecord("b"))
	if !errors.Is(err, injected) {
		t.Fatalf("move with a failing check: %v, want the check's error", err)
	}
	wantCounts(t, s, "failed move", 2, 1, 0, 0)

	at := time.Unix(1800000000, 0)
	again, err := s.MoveToDelayed(Move{From: pending(keys[1])}, at, testRecord("b"))
	if err != nil || again {
		t.Fatalf("b to delayed: again %v, err %v", again, err)
	}
	wantCounts(t, s, "b to delayed", 1, 1, 1, 0)
	// The same record read again from Kafka: nothing saved, done.
	if again, err := s.MoveToDelayed(Move{}, at, testRecord("b")); err != nil || !again {
		t.Fatalf("b to delayed again: again %v, err %v", again, err)
	}
	// Another time under the same ID: refused, nothing written.
	if _, err := s.MoveToDelayed(Move{}, at.Add(time.Hour), testRecord("b")); err == nil {
		t.Fatal("b to delayed at another time: no error")
	}
	wantCounts(t, s, "b again", 1, 1, 1, 0)

	// A redelivery of an ID that waits: the dead letter instead.
	instead := testRecord("b")
	instead.Reason = "failed"
	superseded, err := s.MoveToRedelivery(Move{From: pending(keys[2])}, at, testRecord("b"), instead)
	if err != nil || !superseded {
		t.Fatalf("redelivery of a waiting ID: superseded %v, err %v", superseded, err)
	}
	wantCounts(t, s, "superseded redelivery", 0, 2, 1, 0)

	if err := s.MoveToParked(Move{Alone: true}, "c", []byte("k"), testRecord("p")); err != nil {
		t.Fatal(err)
	}
	entries, bad, err := s.Parked("c", []byte("k"))
	if err != nil || len(bad) != 0 || len(entries) != 1 {
		t.Fatalf("parked: %d entries, %d bad, err %v", len(entries), len(bad), err)
	}
	wantCounts(t, s, "parked", 0, 2, 1, 1)
	if err := s.Unpark(entries, nil); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, s, "unparked", 1, 2, 1, 0)

	// The delayed record's message moves to the dead letters.
	delayed, err := s.ListDelayed(nil, 10)
	if err != nil || len(delayed) != 1 {
		t.Fatalf("delayed: %d, err %v", len(delayed), err)
	}
	if err := s.MoveToDead(Move{From: Source{From: FromDelayed, Delayed: delayed[0].Key}}, testRecord("b")); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, s, "delayed to dead", 1, 3, 0, 0)
}

// TestSaveStopDelayed checks the stop's handling of a delayed message:
// saved anew as pending when its record is gone, updated in place when
// it is there.
func TestSaveStopDelayed(t *testing.T) {
	s := openTestState(t)
	at := time.Unix(1800000000, 0)
	if _, _, err := s.Schedule(testRecord("kept"), at, func(DelayedKey) bool { return false }, nil); err != nil {
		t.Fatal(err)
	}
	delayed, err := s.ListDelayed(nil, 10)
	if err != nil || len(delayed) != 1 {
		t.Fatalf("delayed: %d, err %v", len(delayed), err)
	}
	up := testRecord("kept")
	up.Reason = "interrupted"
	recs, keys, _, err := s.SaveStop(StopSnapshot{Delayed: []StopDelayed{
		{ID: "kept", Key: delayed[0].Key, Record: testRecord("kept"), Update: &up},
		{ID: "gone", Key: DelayedKeyAt(at), Record: testRecord("gone")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Message.ID != "gone" || len(keys) != 1 {
		t.Fatalf("saved anew: %v (keys %v), want only gone", recs, keys)
	}
	wantCounts(t, s, "stop", 1, 0, 1, 0)
	delayed, err = s.ListDelayed(nil, 10)
	if err != nil || len(delayed) != 1 || delayed[0].Record.Reason != "interrupted" {
		t.Fatalf("delayed after the stop: %+v, err %v", delayed, err)
	}
}
