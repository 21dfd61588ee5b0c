package kclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// warnNow is a WarnFunc without backoff: every line goes through.
func warnNow(log *slog.Logger, _, msg string, args ...any) { log.Warn(msg, args...) }

// TestKafkaLoggerOneMsgKey: a kafka-go error line is one JSON object with
// one msg key and kafka-go's text in kafka_message. Before, kafka-go's
// text was a second msg key, which JSON pipelines choke on.
func TestKafkaLoggerOneMsgKey(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	r := &kafkaGo{cfg: Config{WarnFunc: warnNow}}
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

// TestMemberWatch: the member is the one of kafka-go's last join
// line; other lines do not change it.
func TestMemberWatch(t *testing.T) {
	t.Parallel()
	var w memberWatch
	if got := w.joined(); got != "" {
		t.Fatalf("before any join: joined %q", got)
	}
	w.note(kgJoinedLower, []any{"g", "m1", int32(1)})
	w.note(kgJoined, []any{"g", "m1", int32(1)})
	if got := w.joined(); got != "m1" {
		t.Fatalf("joined m1: joined %q", got)
	}
	w.note("Leaving group %s, member %s", []any{"g", "m1"})
	if got := w.joined(); got != "m1" {
		t.Fatalf("m1 leaving: joined %q", got)
	}
	w.note(kgJoined, []any{"g", "m2", int32(2)})
	w.note("Failed to sync group %s: %v", []any{"g", "m1"})
	if got := w.joined(); got != "m2" {
		t.Fatalf("joined m2: joined %q", got)
	}
}
