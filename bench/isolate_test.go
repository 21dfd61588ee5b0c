package main

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/handoff-go/handoff/internal/rental"
	hrt "github.com/handoff-go/handoff/runtime"
)

// TestSideOrderKeepsTheSpec sends a spec with every field set through
// the order a side process reads and requires the same spec back: a
// field added to spec but not to sideOrder fails it, instead of being
// silently zero in the isolated sweep.
func TestSideOrderKeepsTheSpec(t *testing.T) {
	in := spec{
		br:      &broker{addr: "127.0.0.1:9092", topics: []string{"a", "b"}, partitions: 4, pid: 4242},
		group:   "ignored: the side process names its own",
		classes: [][]string{{"a"}, {"b"}}, n: 1000, work: 2 * time.Millisecond, workers: 16,
		commitInterval: time.Second, readerQueue: 100, callCost: time.Millisecond, msgCost: 10 * time.Microsecond,
		maxBatch: 8, client: hrt.ClientKafkaGo,
		franz:  franzFetch{maxBytes: 3 << 20, maxPartitionBytes: 1 << 20, maxWait: 500 * time.Millisecond},
		rental: true, check: rental.Poisoned, localStateOnly: true,
	}
	v := reflect.ValueOf(in)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("the test's spec leaves %s zero: set it, so the round trip covers it", v.Type().Field(i).Name)
		}
	}
	o, err := orderOf(stack{key: runtimeKafkaGo, name: "runtime on kafka-go"}, in, "/tmp/prof")
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	var back sideOrder
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Stack != runtimeKafkaGo || back.Prof != "/tmp/prof" {
		t.Errorf("order's stack and profile: %q, %q", back.Stack, back.Prof)
	}
	got := back.spec()
	if reflect.ValueOf(got.check).Pointer() != reflect.ValueOf(rental.Poisoned).Pointer() {
		t.Error("the check is not rental.Poisoned after the round trip")
	}
	want := in
	want.group = "" // measure names the group in the process that measures
	if !reflect.DeepEqual(*got.br, *want.br) {
		t.Errorf("broker: got %+v, want %+v", *got.br, *want.br)
	}
	got.br, want.br, got.check, want.check = nil, nil, nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("spec after the round trip:\n got %+v\nwant %+v", got, want)
	}
}

// TestSideOrderRefusesOtherChecks: only rental.Poisoned crosses to a side
// process; any other check would be dropped, so it is refused.
func TestSideOrderRefusesOtherChecks(t *testing.T) {
	s := spec{br: &broker{}, check: func([]byte) bool { return false }}
	if _, err := orderOf(stack{key: rawKafkaGo, name: "raw kafka-go"}, s, ""); err == nil {
		t.Fatal("orderOf took a check it cannot send")
	}
}
