package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot/snapshottest"
)

// TestKcatInterop: records produced by an independent client (kcat, on
// librdkafka) with keys and headers are consumed and committed by the
// runtime, and kcat reads the group's commit back.
func TestKcatInterop(t *testing.T) {
	t.Parallel()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat not installed (Debian package kcat); .ci/run installs it")
	}
	b := setup(t, 2, "orders")
	var lines []string
	for i := range 50 {
		lines = append(lines, fmt.Sprintf("key-%d:value-%d", i%5, i))
	}
	cmd := exec.Command(kcat, "-P", "-b", b.broker.Addr(), "-t", "orders", "-K:", "-H", "origin=kcat")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat produce: %v\n%s", err, out)
	}
	var n atomic.Int64
	all := make(chan struct{})
	rt, wait := startNew(t, b.config(func(_ context.Context, m *handoff.Message) error {
		if !strings.HasPrefix(string(m.Key), "key-") || len(m.Headers) != 1 || m.Headers[0].Key != "origin" || string(m.Headers[0].Value) != "kcat" {
			t.Errorf("message from kcat: key %q headers %v", m.Key, m.Headers)
		}
		if n.Add(1) == 50 {
			close(all)
		}
		return nil
	}, func(c *Class) { c.Ordered = true }))
	waitClosed(t, all, func() string { return fmt.Sprintf("handled %d of 50", n.Load()) })
	stopAndWait(t, rt, wait)
	if got := b.committed(); got != 50 {
		t.Errorf("committed %d, want 50", got)
	}
	// kcat, as a member of the same group, finds nothing left to read.
	out, err := exec.Command(kcat, "-C", "-b", b.broker.Addr(), "-G", b.group, "orders", "-e", "-q", "-o", "stored",
		"-X", "auto.offset.reset=earliest").CombinedOutput()
	if err != nil {
		t.Fatalf("kcat consume: %v\n%s", err, out)
	}
	if strings.TrimSpace(string(out)) != "" {
		t.Errorf("kcat in the same group read records past the commit:\n%s", out)
	}
}

// rawRecord is a record as the broker stores it, read with kafka-go's
// protocol client (which keeps nil and empty apart) with the codec of
// its batch.
type rawRecord struct {
	offset     int64
	codec      string
	time       time.Time
	key, value []byte
	headers    []kafka.Header
}

// readRaw returns every record of topic's partition 0, below its high
// watermark.
func readRaw(t *testing.T, addr, topic string) []rawRecord {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(addr), Transport: tr, Timeout: 10 * time.Second}
	var out []rawRecord
	for offset := int64(0); ; {
		resp, err := client.Fetch(context.Background(), &kafka.FetchRequest{Topic: topic, Offset: offset, MaxBytes: 16 << 20, MaxWait: 100 * time.Millisecond})
		if err == nil {
			err = resp.Error
		}
		if err != nil {
			t.Fatalf("raw fetch of %s at %d: %v", topic, offset, err)
		}
		if offset >= resp.HighWatermark {
			return out
		}
		stream, ok := resp.Records.(*protocol.RecordStream)
		if !ok {
			t.Fatalf("raw fetch of %s: records are a %T", topic, resp.Records)
		}
		for _, rr := range stream.Records {
			batch, ok := rr.(*protocol.RecordBatch)
			if !ok {
				continue // a control batch
			}
			for {
				rec, err := batch.ReadRecord()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if rec.Offset < offset {
					continue
				}
				r := rawRecord{offset: rec.Offset, codec: batch.Attributes.Compression().String(), time: rec.Time.UTC(), headers: slices.Clone(rec.Headers)}
				if r.key, err = protocol.ReadAll(rec.Key); err == nil {
					r.value, err = protocol.ReadAll(rec.Value)
				}
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, r)
				offset = rec.Offset + 1
			}
		}
	}
}

// sameBytes reports whether a and b are equal and both nil or both not.
func sameBytes(a, b []byte) bool { return bytes.Equal(a, b) && (a == nil) == (b == nil) }

// kcatCase is one kind of record kcat produces in TestKcatRecords.
type kcatCase struct {
	name  string
	codec string   // kcat's -z; the codec its batch must be stored with
	args  []string // more kcat flags
	lines []string
	// nilKey, nilValue: what the stored records must have.
	nilKey, nilValue, emptyKey, emptyValue bool
}

// TestKcatRecords: records an independent client (kcat, librdkafka)
// writes — batches compressed with gzip, snappy, lz4 and zstd, headers
// (with an empty and a null value), an empty key, no key, a tombstone
// (null value), an empty value and a value near the broker's 1 MiB
// default — are each handled once with key, value, headers and
// timestamp as the broker stores them, nil and empty kept apart. The
// stored form is checked first (the codec of each batch, and that kcat
// wrote the nil or empty it was asked for), so that the test cannot pass
// on records kcat did not write. The handler fails some of them
// permanently: their dead letters, in the state file and published to
// the dead-letter topic, keep the same bytes and the timestamp.
func TestKcatRecords(t *testing.T) {
	t.Parallel()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat not installed (Debian package kcat); .ci/run installs it")
	}
	b := setup(t, 1, "kc", "kc-dlq")
	payload := strings.Repeat("compressible ", 40)
	var cases []kcatCase
	for _, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		c := kcatCase{name: codec, codec: codec}
		for i := range 20 {
			c.lines = append(c.lines, fmt.Sprintf("%s-%d:%s-%d %s", codec, i%3, codec, i, payload))
		}
		cases = append(cases, c)
	}
	cases = append(cases,
		kcatCase{name: "empty key", codec: "none", lines: []string{":value of an empty key"}, emptyKey: true},
		kcatCase{name: "no key", codec: "none", args: []string{"-K", ""}, lines: []string{"value of no key"}, nilKey: true},
		kcatCase{name: "tombstone", codec: "none", args: []string{"-Z"}, lines: []string{"tomb:"}, nilValue: true},
		kcatCase{name: "empty value", codec: "none", lines: []string{"empty:"}, emptyValue: true},
		kcatCase{name: "near 1 MiB", codec: "gzip", lines: []string{"big:" + strings.Repeat("x", 1_000_000-2_000)}},
	)
	caseOf := map[int64]int{} // offset -> case
	var next int64
	for i, c := range cases {
		args := []string{"-P", "-b", b.broker.Addr(), "-t", "kc", "-p", "0", "-z", c.codec, "-K:",
			"-H", "case=" + c.name, "-H", "empty=", "-H", "null", "-X", "message.max.bytes=2000000"}
		args = append(args, c.args...)
		cmd := exec.Command(kcat, args...)
		cmd.Stdin = strings.NewReader(strings.Join(c.lines, "\n") + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kcat produce %s: %v\n%s", c.name, err, out)
		}
		for range c.lines {
			caseOf[next] = i
			next++
		}
	}

	// What the broker stores.
	raw := readRaw(t, b.broker.Addr(), "kc")
	if len(raw) != int(next) {
		t.Fatalf("broker stores %d records, kcat wrote %d", len(raw), next)
	}
	for _, r := range raw {
		c := cases[caseOf[r.offset]]
		want := c.codec
		if want == "none" {
			want = "uncompressed"
		}
		if r.codec != want {
			t.Errorf("%s: offset %d stored in a %s batch, want %s (did librdkafka fall back?)", c.name, r.offset, r.codec, want)
		}
		if (r.key == nil) != c.nilKey || (r.value == nil) != c.nilValue ||
			c.emptyKey && (r.key == nil || len(r.key) > 0) || c.emptyValue && (r.value == nil || len(r.value) > 0) {
			t.Errorf("%s: kcat stored key %q (nil %v), value of %d bytes (nil %v)", c.name, r.key, r.key == nil, len(r.value), r.value == nil)
		}
		if len(r.headers) != 3 || r.headers[1].Value == nil || len(r.headers[1].Value) != 0 || r.headers[2].Value != nil {
			t.Errorf("%s: kcat stored headers %q", c.name, r.headers)
		}
		if r.time.IsZero() || time.Since(r.time) > time.Hour {
			t.Errorf("%s: stored timestamp %v", c.name, r.time)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// What the handler is given. Every seventh record, and the special
	// ones, fail permanently: dead letters.
	failed := func(off int64) bool { return off%7 == 0 || caseOf[off] >= 5 }
	var (
		mu      sync.Mutex
		handled = map[int64]int{}
		got     = map[int64]*handoff.Message{}
	)
	all := make(chan struct{})
	cfg := b.config(func(_ context.Context, m *handoff.Message) error {
		mu.Lock()
		defer mu.Unlock()
		handled[m.Origin.Offset]++
		kept := *m // a copy: the struct's fields stay valid when a class recycles its messages
		got[m.Origin.Offset] = &kept
		if len(handled) == int(next) {
			close(all)
		}
		if failed(m.Origin.Offset) {
			return handoff.Permanent(errors.New("dead on purpose"))
		}
		return nil
	}, func(c *Class) { c.DeadLetterTopic = "kc-dlq" })
	cfg.Classes = slices.DeleteFunc(cfg.Classes, func(c Class) bool { return c.Name != "kc" })
	rt, wait := startNew(t, cfg)
	waitClosed(t, all, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("handled %d of %d", len(handled), next)
	})
	stopAndWait(t, rt, wait)
	same := func(where string, r rawRecord, m *handoff.Message) {
		t.Helper()
		name := cases[caseOf[r.offset]].name
		if !sameBytes(m.Key, r.key) || !sameBytes(m.Value, r.value) {
			t.Errorf("%s, %s, offset %d: key %q (nil %v), %d value bytes (nil %v); stored key %q (nil %v), %d value bytes (nil %v)",
				where, name, r.offset, m.Key, m.Key == nil, len(m.Value), m.Value == nil, r.key, r.key == nil, len(r.value), r.value == nil)
		}
		if !m.Timestamp.Equal(r.time) {
			t.Errorf("%s, %s, offset %d: timestamp %v, stored %v", where, name, r.offset, m.Timestamp, r.time)
		}
		if len(m.Headers) != len(r.headers) {
			t.Fatalf("%s, %s, offset %d: headers %q, stored %q", where, name, r.offset, m.Headers, r.headers)
		}
		for i, h := range r.headers {
			if m.Headers[i].Key != h.Key || !sameBytes(m.Headers[i].Value, h.Value) {
				t.Errorf("%s, %s, offset %d: header %d is %q=%q (nil %v), stored %q=%q (nil %v)",
					where, name, r.offset, i, m.Headers[i].Key, m.Headers[i].Value, m.Headers[i].Value == nil, h.Key, h.Value, h.Value == nil)
			}
		}
	}
	perCase := make([]int, len(cases))
	dead := 0
	for _, r := range raw {
		if n := handled[r.offset]; n != 1 {
			t.Errorf("offset %d handled %d times", r.offset, n)
		}
		same("handled", r, got[r.offset])
		perCase[caseOf[r.offset]]++
		if failed(r.offset) {
			dead++
		}
	}
	for i, c := range cases {
		t.Logf("%-11s codec %-6s records %2d handled once each", c.name, c.codec, perCase[i])
	}

	// The dead letters: in the state file, and on the dead-letter topic,
	// with the record's bytes and timestamp (headers there: handoff's
	// first, then the record's).
	stored := snapshottest.Dead(t, b.state)
	if len(stored) != dead {
		t.Fatalf("%d dead letters in the state file, want %d", len(stored), dead)
	}
	byOffset := map[int64]rawRecord{}
	for _, r := range raw {
		byOffset[r.offset] = r
	}
	for _, e := range stored {
		same("dead letter", byOffset[e.Record.Message.Origin.Offset], &e.Record.Message)
	}
	published := readRaw(t, b.broker.Addr(), "kc-dlq")
	if len(published) != dead {
		t.Fatalf("%d dead letters published, want %d", len(published), dead)
	}
	for _, p := range published {
		var off int64 = -1
		var own []kafka.Header
		for _, h := range p.headers {
			switch {
			case h.Key == HeaderOriginOffset:
				off, _ = strconv.ParseInt(string(h.Value), 10, 64)
			case !strings.HasPrefix(h.Key, "handoff-"):
				own = append(own, h)
			}
		}
		r, ok := byOffset[off]
		if !ok {
			t.Fatalf("published dead letter names offset %d", off)
		}
		m := &handoff.Message{Key: p.key, Value: p.value, Timestamp: p.time}
		for _, h := range own {
			m.Headers = append(m.Headers, handoff.Header{Key: h.Key, Value: h.Value})
		}
		same("published dead letter", r, m)
	}
	t.Logf("dead letters: %d stored, %d published, bytes and timestamps intact", len(stored), len(published))
}
