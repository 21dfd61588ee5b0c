package runtime

import (
	"context"
	"errors"
	"log/slog"
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

// TestStartFailureLogsNoStop: a start that fails (two classes none of
// whose topics exists) logs no stop as if a run had happened (no "stop
// begins", phases or "stop complete" at Info, no warning that the classes
// run without their topics) and never the start's error, which Run
// returns for its caller to report once: on one line, naming both
// classes. (The teardown logged a whole stop, and the pools' lines
// carried the three joined errors, with their newlines, as their cause.)
func TestStartFailureLogsNoStop(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "exists")
	log, rec := recordLogs(t)
	cfg := b.config(func(context.Context, *handoff.Message) error { return nil }, nil)
	cfg.Logger = log
	for _, name := range []string{"ghost", "phantom"} {
		cfg.Classes = append(cfg.Classes, Class{Name: name, Topics: []string{name + "-topic"},
			Handler: func(context.Context, *handoff.Message) error { return nil }})
	}
	rt, err := newRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	rep, err := wait()
	var te *TopicError
	if !errors.Is(err, ErrStart) || !errors.As(err, &te) {
		t.Fatalf("Run = %v, want a start error with a TopicError", err)
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, `"ghost"`) || !strings.Contains(msg, `"phantom"`) {
		t.Errorf("Run's error %q: want one line naming both classes", msg)
	}
	if rep == nil || rep.Succeeded != 0 || rep.Snapshotted != 0 {
		t.Errorf("report of the failed start: %+v", rep)
	}
	for _, r := range rec.records(slog.LevelInfo) {
		switch r.msg {
		case "stop begins", "stop phase done", "stop complete",
			"topic does not exist; its class runs without it and the runtime is not ready":
			t.Errorf("a failed start logged %s %q %v", r.level, r.msg, r.attrs)
		}
		for k, v := range r.attrs {
			if strings.Contains(v, "none of its topics exists") {
				t.Errorf("a failed start logged its error in %s %q %s=%q: it is Run's to return", r.level, r.msg, k, v)
			}
		}
	}
}
