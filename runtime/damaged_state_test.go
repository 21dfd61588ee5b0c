package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// TestDamagedStateFileIsAStartError: a state file with a damaged page
// (one overwritten with zeros) under the pending records makes Run return
// an error matching ErrStart and snapshot.ErrDamaged, naming the file: a
// clear error, never a crash of the process (the recovery reads the
// records in a goroutine of the store's, where a panic of bbolt ended the
// program).
func TestDamagedStateFileIsAStartError(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "orders")
	recs := make([]snapshot.Record, 300)
	for i := range recs {
		recs[i] = snapshot.Record{Message: handoff.Message{ID: fmt.Sprintf("s-%d", i), Class: "orders", Value: []byte("v")}, Reason: "unstarted"}
	}
	snapshottest.SeedPending(t, b.state, recs...)
	raw, err := os.ReadFile(b.state)
	if err != nil {
		t.Fatal(err)
	}
	const pageSize = 4096
	clear(raw[2*pageSize : 3*pageSize]) // a page of the pending bucket's
	if err := os.WriteFile(b.state, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := b.config(func(context.Context, *handoff.Message) error { return nil }, nil)
	cfg.LocalStateOnly = true
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = rt.Run(context.Background())
	if !errors.Is(err, ErrStart) || !errors.Is(err, snapshot.ErrDamaged) {
		t.Fatalf("Run on a damaged state file: %v, want ErrStart and snapshot.ErrDamaged", err)
	}
	t.Log(err)
}
