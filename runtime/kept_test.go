package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

// TestStopLastLineSaysWhatStays: the stop's last log line says what the
// state file keeps: here one dead letter and one delayed message, and
// nothing pending.
func TestStopLastLineSaysWhatStays(t *testing.T) {
	t.Parallel()
	state := t.TempDir() + "/s.db"
	logs := &logBuffer{}
	done := make(chan struct{})
	rt, err := newRuntime(Config{StatePath: state, Logger: logs.logger(), Classes: []Class{{Name: "mail", Workers: 1,
		Handler: func(_ context.Context, m *handoff.Message) error {
			defer close(done)
			return handoff.Permanent(errors.New("bad address"))
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	wait := start(t, rt, context.Background())
	waitFor(t, "ready", rt.Ready)
	if err := rt.Schedule(context.Background(), "mail", &handoff.Message{ID: "later"}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := rt.Submit(context.Background(), "mail", &handoff.Message{ID: "now"}); err != nil {
		t.Fatal(err)
	}
	<-done
	waitFor(t, "the dead letter", func() bool { dl, _, err := rt.DeadLetters("", "", 10); return err == nil && len(dl) == 1 })
	rt.Shutdown(context.Background())
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	last := lines[len(lines)-1]
	for _, want := range []string{`msg="stop complete"`, "state_file.path=" + state, "state_file.pending=0", "state_file.dead=1",
		"state_file.delayed=1", "state_file.parked=0", "state_file.quarantine=0"} {
		if !strings.Contains(last, want) {
			t.Errorf("last line does not say %q:\n%s", want, last)
		}
	}
}
