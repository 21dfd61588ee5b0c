package runtime

import "testing"

// TestMemberWatch: the member kafka-go joined with is stranded until a
// LeaveGroup line for it, again after that leave failed, and a new join
// replaces it.
func TestMemberWatch(t *testing.T) {
	t.Parallel()
	onlyClient(t, ClientKafkaGo, "memberWatch reads kafka-go's own log lines")
	var w memberWatch
	if got := w.stranded(); got != "" {
		t.Fatalf("before any join: stranded %q", got)
	}
	w.note(kgJoinedLower, []any{"g", "m1", int32(1)})
	w.note(kgJoined, []any{"g", "m1", int32(1)})
	if got := w.stranded(); got != "m1" {
		t.Fatalf("joined m1: stranded %q", got)
	}
	w.note(kgLeaving, []any{"g", "other"})
	if got := w.stranded(); got != "m1" {
		t.Fatalf("another member left: stranded %q", got)
	}
	w.note(kgLeaving, []any{"g", "m1"})
	if got := w.stranded(); got != "" {
		t.Fatalf("m1 left: stranded %q", got)
	}
	w.note(kgLeaveFailed, []any{"g", "m1", "broken pipe"})
	if got := w.stranded(); got != "m1" {
		t.Fatalf("m1's leave failed: stranded %q", got)
	}
	w.note(kgJoined, []any{"g", "m2", int32(2)})
	w.note("Failed to sync group %s: %v", []any{"g", "m1"})
	if got := w.stranded(); got != "m2" {
		t.Fatalf("joined m2: stranded %q", got)
	}
}
