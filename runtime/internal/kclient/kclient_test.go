package kclient

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/devbroker"
)

// TestMetadataAndProduce runs each client against an embedded broker
// without a runtime: the topic check's Missing, the dead-letter Writer
// and the lag sampler's Offsets, then Close with no membership.
func TestMetadataAndProduce(t *testing.T) {
	t.Parallel()
	for _, name := range []string{KafkaGo, FranzGo} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := devbroker.Start(devbroker.Config{Topics: []string{"orders"}, Partitions: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			cfg := Config{Client: name, Brokers: b.Addrs(), ClientID: "test", Group: "g",
				SessionTimeout: 6 * time.Second, RebalanceTimeout: 6 * time.Second, FetchMaxWait: 100 * time.Millisecond,
				FetchQueue: 10, Log: slog.New(slog.DiscardHandler), WarnFunc: warnNow, FetchErrorFunc: func(string) {}, FetchFunc: func(Partition, error) {}}
			cl, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close(time.Now().Add(time.Second))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			missing, err := cl.Missing(ctx, []string{"orders", "nope"})
			if err != nil {
				t.Fatal(err)
			}
			if want := map[string]bool{"nope": true}; !maps.Equal(missing, want) {
				t.Errorf("missing %v, want %v", missing, want)
			}

			w, err := NewWriter(cfg, (&net.Dialer{}).DialContext)
			if err != nil {
				t.Fatal(err)
			}
			recs := []OutRecord{
				{Topic: "orders", Key: []byte("k"), Value: []byte("a"), Headers: []handoff.Header{{Key: "h", Value: []byte{}}}},
				{Topic: "orders", Key: []byte("k"), Value: []byte("b")},
				{Topic: "orders", Key: []byte("k"), Value: nil},
			}
			if err := errors.Join(w.Write(ctx, recs)...); err != nil {
				t.Fatalf("write: %v", err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}

			ps := []Partition{{"orders", 0}, {"orders", 1}}
			offs, err := cl.Offsets(ctx, ps)
			if err != nil {
				t.Fatal(err)
			}
			// One key: all three on one partition, the other empty.
			var total int64
			for _, p := range ps {
				r, ok := offs[p]
				if !ok || r.First != 0 {
					t.Errorf("%s: %+v (answered %v), want first offset 0", p, r, ok)
				}
				total += r.Last
			}
			if total != 3 || (offs[ps[0]].Last != 0 && offs[ps[1]].Last != 0) {
				t.Errorf("high watermarks %v, want 3 records on one partition", offs)
			}
		})
	}
}

// TestMissingOf: a topic is present when it is answered without an error
// and with partitions; the client's unknown-topic error marks it
// missing, any other error fails the check.
func TestMissingOf(t *testing.T) {
	t.Parallel()
	unknown := errors.New("unknown topic")
	other := errors.New("not authorized")
	missing, err := missingOf([]string{"a", "b", "c", "d"}, []topicAnswer{
		{name: "a", partitions: 3},
		{name: "b", err: unknown},
		{name: "c", partitions: 0},
	}, unknown)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]bool{"b": true, "c": true, "d": true}; !maps.Equal(missing, want) {
		t.Errorf("missing %v, want %v", missing, want)
	}
	if _, err := missingOf([]string{"a"}, []topicAnswer{{name: "a", err: other}}, unknown); !errors.Is(err, other) {
		t.Errorf("an error other than unknown: %v", err)
	}
}

// TestNoteRejoin: a member joins the rebalance after a generation once.
// Two members that revoke in the same generation announce it twice; a
// second ForceRebalance while the first join is under way would start a
// rebalance of its own after it, which holds up the new owner's first
// fetch until every member's next heartbeat.
func TestNoteRejoin(t *testing.T) {
	t.Parallel()
	f, err := newFranzGo(Config{Brokers: []string{"127.0.0.1:1"}, Log: slog.New(slog.DiscardHandler)}) // makes no connection
	if err != nil {
		t.Fatal(err)
	}
	defer f.admin.Close()
	for i, c := range []struct {
		gen  int32
		want bool
	}{{0, true}, {0, false}, {3, true}, {3, false}, {2, false}, {4, true}} {
		if got := f.noteRejoin(c.gen); got != c.want {
			t.Errorf("step %d: noteRejoin(%d) = %t, want %t", i, c.gen, got, c.want)
		}
	}
	if f.Rejoin("other", 9) {
		t.Error("Rejoin before Join rejoined")
	}
}

// TestJoinWatch: the member is joining between a JoinGroup written and
// the next SyncGroup answer read, for at most the bound given.
func TestJoinWatch(t *testing.T) {
	t.Parallel()
	var w joinWatch
	var meta kgo.BrokerMetadata
	if w.joining(time.Minute) {
		t.Fatal("joining before any join")
	}
	w.OnBrokerWrite(meta, int16(kmsg.JoinGroup), 100, 0, 0, errors.New("broken pipe"))
	if w.joining(time.Minute) {
		t.Fatal("joining after a JoinGroup that was not written")
	}
	w.OnBrokerWrite(meta, int16(kmsg.Heartbeat), 100, 0, 0, nil)
	if w.joining(time.Minute) {
		t.Fatal("joining after a heartbeat")
	}
	w.OnBrokerWrite(meta, int16(kmsg.JoinGroup), 100, 0, 0, nil)
	if !w.joining(time.Minute) {
		t.Fatal("not joining after a JoinGroup written")
	}
	if w.joining(0) {
		t.Fatal("joining past the bound")
	}
	w.OnBrokerRead(meta, int16(kmsg.SyncGroup), 100, 0, 0, nil)
	if w.joining(time.Minute) {
		t.Fatal("joining after the SyncGroup answer")
	}
}
