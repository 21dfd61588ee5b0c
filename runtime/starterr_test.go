package runtime

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

// TestStartErrorMatchesErrStart: a start that fails on a locked state
// file returns an error that matches ErrStart and still its cause
// (snapshot.ErrLocked), reading as the cause alone; a clean run's is nil.
func TestStartErrorMatchesErrStart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	cfg := Config{StatePath: path, LockTimeout: 50 * time.Millisecond, Logger: testLogger(t),
		Classes: []Class{{Name: "local", Handler: func(context.Context, *handoff.Message) error { return nil }}}}
	st, err := snapshot.Open(path, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = rt.Run(context.Background())
	if !errors.Is(err, ErrStart) || !errors.Is(err, snapshot.ErrLocked) {
		t.Fatalf("Run on a locked file: %v; want it to match ErrStart and snapshot.ErrLocked", err)
	}
	if strings.Contains(err.Error(), ErrStart.Error()) || !strings.Contains(err.Error(), path) {
		t.Errorf("error %q: want the cause's own text, naming the file", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	rt, err = newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := rt.Run(ctx); done <- err }()
	waitFor(t, "ready", rt.Ready)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("clean run: %v", err)
	}
}
