package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestKafkaLoggerOneMsgKey: a kafka-go error line is one JSON object with
// one msg key and kafka-go's text in kafka_message. Before, kafka-go's
// text was a second msg key, which JSON pipelines choke on.
func TestKafkaLoggerOneMsgKey(t *testing.T) {
	t.Parallel()
	onlyClient(t, ClientKafkaGo, "kafkaLogger formats kafka-go's printf-style log lines")
	var buf bytes.Buffer
	r := &Runtime{logs: newLogBackoff()}
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	r.kafkaLogger(context.Background(), log, true)("Unable to establish connection to consumer group coordinator for group %s: %v", "g", errors.New("connection refused"))
	line := buf.String()
	if n := strings.Count(line, `"msg":`); n != 1 {
		t.Errorf("%d msg keys in %s", n, line)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatal(err)
	}
	if got, _ := rec["kafka_message"].(string); !strings.Contains(got, "connection refused") {
		t.Errorf("kafka_message = %q in %s", got, line)
	}
	// A loop our own Close ended is no warning (a normal stop's reader
	// close reports context.Canceled).
	buf.Reset()
	r.kafkaLogger(context.Background(), log, true)("kafka reader failed to read lag of partition %d of %s: %v", 0, "t", context.Canceled)
	if buf.Len() != 0 {
		t.Errorf("a cancelled loop logged %s", buf.String())
	}
	// Nor is any error once the fetching has ended: a closing reader's
	// connection ends with an i/o timeout.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.kafkaLogger(ctx, log, true)("the kafka reader got an unknown error reading partition %d of %s at offset %d: %v", 1, "t", 14, errors.New("i/o timeout"))
	if buf.Len() != 0 {
		t.Errorf("a closing reader logged %s", buf.String())
	}
}

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
		r := &Runtime{logs: newLogBackoff()}
		kl := r.kafkaLogger(context.Background(), log, true)
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
