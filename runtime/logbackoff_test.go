package runtime

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestLogBackoff: a line repeated twice a second (kafka-go's pace with an
// unreachable broker) is logged at 0, 1, 3, 7, 15, 31 … seconds, each
// with the count suppressed since the last, then at most once a minute;
// after a quiet spell it starts over. Before, every line was logged: 120
// a minute.
func TestLogBackoff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		logs := newLogBackoff()
		// A kafka-go error line as the client logs it (kclient's
		// kafkaLogger), through the backoff it is given (WarnFunc).
		kl := func(format string, args ...any) {
			logs.warn(log, "kafka-go: "+format, "kafka-go error", "kafka_message", fmt.Sprintf(format, args...))
		}
		began := time.Now()
		var at []time.Duration
		lines := 0
		for range 2 * 300 { // five minutes
			n := strings.Count(buf.String(), "\n")
			kl("Failed to join group %s: %v", "g", "dial tcp: connection refused")
			if strings.Count(buf.String(), "\n") > n {
				at = append(at, time.Since(began))
			}
			lines++
			time.Sleep(500 * time.Millisecond)
		}
		want := []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second, 15 * time.Second, 31 * time.Second,
			63 * time.Second, 123 * time.Second, 183 * time.Second, 243 * time.Second}
		if len(at) != len(want) {
			t.Fatalf("%d of %d lines logged, at %v; want at %v", len(at), lines, at, want)
		}
		for i := range want {
			if at[i] != want[i] {
				t.Errorf("line %d logged at %s, want %s", i, at[i], want[i])
			}
		}
		if !strings.Contains(buf.String(), "suppressed=") {
			t.Errorf("no suppressed count in\n%s", buf.String())
		}
		// Quiet for two minutes: the next one goes through at once, and
		// the gaps start over.
		time.Sleep(2 * time.Minute)
		n := strings.Count(buf.String(), "\n")
		kl("Failed to join group %s: %v", "g", "again")
		time.Sleep(500 * time.Millisecond)
		kl("Failed to join group %s: %v", "g", "again")
		if got := strings.Count(buf.String(), "\n") - n; got != 1 {
			t.Errorf("after a quiet spell %d lines, want 1 (the second within the first gap)", got)
		}
	})
}
