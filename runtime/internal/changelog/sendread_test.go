package changelog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// readAll reads input partition p from from and returns the records and
// the next offset.
func readAll(t *testing.T, cl *Client, input string, p int32, from int64) ([]Rec, int64) {
	t.Helper()
	var got []Rec
	next, err := cl.Read(timeout(t), input, p, from, func(rs []Rec) error {
		got = append(got, rs...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, next
}

func TestSendRead(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := newClient(t, c, nil)
	ctx := timeout(t)
	if err := cl.Ensure(ctx, map[string]int32{"orders": 3}); err != nil {
		t.Fatal(err)
	}

	// Goroutines send in turn (Send serialized by mu) and wait at once;
	// sent keeps each partition's records in the order of the Sends.
	var (
		mu   sync.Mutex
		sent [3][]*Out
		wg   sync.WaitGroup
		errs = make([]error, 8)
	)
	for g := range errs {
		wg.Go(func() {
			for i := range 20 {
				var recs []*Out
				for j := range 5 {
					p := int32((g + i + j) % 2) // partition 2 stays empty
					v := fmt.Appendf(nil, "g%d-i%d-j%d", g, i, j)
					switch j {
					case 3:
						v = nil // tombstone
					case 4:
						v = []byte{} // empty, not a tombstone
					}
					recs = append(recs, &Out{Input: "orders", Partition: p, Key: fmt.Appendf(nil, "k%d", j), Value: v})
				}
				mu.Lock()
				wait := cl.Send(recs)
				for _, r := range recs {
					sent[r.Partition] = append(sent[r.Partition], r)
				}
				mu.Unlock()
				if err := wait(ctx); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	for p := range int32(2) {
		got, next := readAll(t, cl, "orders", p, 0)
		want := sent[p]
		if len(got) != len(want) || next != int64(len(want)) {
			t.Fatalf("partition %d: read %d records up to %d, sent %d", p, len(got), next, len(want))
		}
		for i, r := range got {
			w := want[i]
			if r.Offset != int64(i) || w.Offset != r.Offset || !bytes.Equal(r.Key, w.Key) || !bytes.Equal(r.Value, w.Value) || (r.Value == nil) != (w.Value == nil) {
				t.Fatalf("partition %d record %d: read %d %q=%q (nil %v), sent %d %q=%q (nil %v)",
					p, i, r.Offset, r.Key, r.Value, r.Value == nil, w.Offset, w.Key, w.Value, w.Value == nil)
			}
		}
		// From the middle: the rest.
		mid := int64(len(want) / 2)
		rest, next := readAll(t, cl, "orders", p, mid)
		if next != int64(len(want)) || len(rest) != len(want)-int(mid) || rest[0].Offset != mid {
			t.Errorf("partition %d from %d: %d records up to %d", p, mid, len(rest), next)
		}
		// At the end: nothing, at once.
		if rest, next := readAll(t, cl, "orders", p, int64(len(want))); len(rest) != 0 || next != int64(len(want)) {
			t.Errorf("partition %d from its end: %d records up to %d", p, len(rest), next)
		}
		// Past the end: the changelog is not the one read before.
		_, err := cl.Read(ctx, "orders", p, int64(len(want))+5, func([]Rec) error { return nil })
		if !errors.Is(err, ErrBeyondEnd) {
			t.Errorf("partition %d past its end: %v, want ErrBeyondEnd", p, err)
		}
	}
	if got, next := readAll(t, cl, "orders", 2, 0); len(got) != 0 || next != 0 {
		t.Errorf("empty partition: %d records up to %d", len(got), next)
	}

	// fn's error stops the read and comes back, with the offset after
	// what fn was given.
	boom := errors.New("boom")
	next, err := cl.Read(ctx, "orders", 0, 0, func(rs []Rec) error { return boom })
	if !errors.Is(err, boom) || next <= 0 {
		t.Errorf("fn failing: %d, %v", next, err)
	}

	// A cancelled ctx ends the read.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := cl.Read(cctx, "orders", 0, 0, func([]Rec) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled read: %v", err)
	}
}

// TestReadCompacted reads a partition whose log compaction thinned: keys'
// last values only, offsets skipping, up to the same end.
func TestReadCompacted(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := newClient(t, c, nil)
	ctx := timeout(t)
	if err := cl.Ensure(ctx, map[string]int32{"orders": 1}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		recs := []*Out{
			{Input: "orders", Key: []byte("a"), Value: fmt.Appendf(nil, "a%d", i)},
			{Input: "orders", Key: fmt.Appendf(nil, "b%d", i), Value: []byte("b")},
		}
		if err := cl.Send(recs)(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c.Compact()
	got, next := readAll(t, cl, "orders", 0, 0)
	if next != 20 {
		t.Errorf("next %d, want 20", next)
	}
	last := map[string]string{}
	for _, r := range got {
		last[string(r.Key)] = string(r.Value)
	}
	if last["a"] != "a9" || len(last) != 11 || !slices.IsSortedFunc(got, func(a, b Rec) int { return int(a.Offset - b.Offset) }) {
		t.Errorf("after compaction read %d records: %v", len(got), last)
	}
}

// readMeta reads the meta topic whole: the last value of each key, no
// key whose last record is a tombstone.
func readMeta(ctx context.Context, cl *Client) (map[string][]byte, error) {
	m := map[string][]byte{}
	_, err := cl.ReadMetaFrom(ctx, 0, func(rs []Rec) error {
		for _, r := range rs {
			if r.Value == nil {
				delete(m, string(r.Key))
			} else {
				m[string(r.Key)] = r.Value
			}
		}
		return nil
	})
	return m, err
}

func TestMeta(t *testing.T) {
	t.Parallel()
	cl, ctx := metaClient(t)
	if m, err := readMeta(ctx, cl); err != nil || len(m) != 0 {
		t.Fatalf("empty meta: %v, %v", m, err)
	}
	for i, kv := range [][2]string{{"a", "1"}, {"b", "2"}, {"a", ""}, {"c", "3"}, {"b", "22"}} {
		var v []byte
		if kv[1] != "" {
			v = []byte(kv[1])
		}
		off, err := cl.WriteMeta(ctx, []byte(kv[0]), v)
		if err != nil {
			t.Fatal(err)
		}
		if off != int64(i) {
			t.Errorf("write %d of the meta topic at offset %d, want %d", i, off, i)
		}
	}
	m, err := readMeta(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || string(m["b"]) != "22" || string(m["c"]) != "3" {
		t.Errorf("meta %q, want b=22 c=3", m)
	}
}

// TestSendFails: a broker that stops answering produce requests, and one
// that refuses them: the wait fails within the timeout, and Close is
// prompt.
func TestSendFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		bad  func(*testing.T, *Client, *kfakeCluster)
	}{
		{"silent", func(t *testing.T, cl *Client, c *kfakeCluster) {
			c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				return nil, nil, true // no answer
			})
		}},
		{"refusing", func(t *testing.T, cl *Client, c *kfakeCluster) {
			c.Fault(kfakeFault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.TopicAuthorizationFailed, Count: -1})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := cluster(t)
			const limit = 500 * time.Millisecond
			cl := newClient(t, c, func(cfg *Config) { cfg.Timeout = limit })
			ctx := timeout(t)
			if err := cl.Ensure(ctx, map[string]int32{"orders": 2}); err != nil {
				t.Fatal(err)
			}
			// One good write first: the producer has its id and connection.
			if err := cl.Send([]*Out{{Input: "orders", Key: []byte("k"), Value: []byte("v")}})(ctx); err != nil {
				t.Fatal(err)
			}
			tc.bad(t, cl, c)
			begin := time.Now()
			o := &Out{Input: "orders", Partition: 1, Key: []byte("k"), Value: []byte("v"), Offset: -7}
			err := cl.Send([]*Out{o})(ctx)
			took := time.Since(begin)
			if err == nil {
				t.Fatal("wait did not fail")
			}
			if took > limit+time.Second || o.Offset != -7 {
				t.Errorf("wait failed after %s (limit %s), offset %d: %v", took, limit, o.Offset, err)
			}
			t.Log(err)
			// Queued again, then closed under it.
			wait := cl.Send([]*Out{{Input: "orders", Key: []byte("k"), Value: []byte("v")}})
			begin = time.Now()
			cl.Close()
			if took := time.Since(begin); took > time.Second {
				t.Errorf("close took %s", took)
			}
			if err := wait(ctx); err == nil {
				t.Error("wait after Close did not fail")
			}
		})
	}
}

// TestReadClosed: a read whose fetch gets no answer ends when the Client
// closes, and when its ctx ends.
func TestReadClosed(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := newClient(t, c, nil)
	ctx := timeout(t)
	if err := cl.Ensure(ctx, map[string]int32{"orders": 1}); err != nil {
		t.Fatal(err)
	}
	if err := cl.Send([]*Out{{Input: "orders", Key: []byte("k"), Value: []byte("v")}})(ctx); err != nil {
		t.Fatal(err)
	}
	fetched := make(chan struct{}, 8)
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		fetched <- struct{}{}
		return nil, nil, true // no answer
	})
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := cl.Read(short, "orders", 0, 0, func([]Rec) error { return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("read past its ctx: %v", err)
	}
	done := make(chan error)
	go func() {
		_, err := cl.Read(ctx, "orders", 0, 0, func([]Rec) error { return nil })
		done <- err
	}()
	<-fetched
	<-fetched
	begin := time.Now()
	cl.Close()
	if err := <-done; !errors.Is(err, errClosed) || time.Since(begin) > time.Second {
		t.Errorf("read at Close: %v after %s", err, time.Since(begin))
	}
}

// TestReadsShareMetadata: the reads of many partitions of one topic that
// start together, as a generation's restores do, ask the broker for the
// topic's metadata once, not once each (64 requests before they shared
// one), and all of them read their partition.
func TestReadsShareMetadata(t *testing.T) {
	t.Parallel()
	const partitions = 64
	c := cluster(t)
	ctx := timeout(t)
	if err := newClient(t, c, nil).Ensure(ctx, map[string]int32{"orders": partitions}); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, c, nil) // nothing cached
	topic := cl.Topic("orders")
	var asked atomic.Int32
	c.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, rt := range req.(*kmsg.MetadataRequest).Topics {
			if rt.Topic != nil && *rt.Topic == topic && asked.Add(1) == 1 {
				time.Sleep(100 * time.Millisecond) // the others start meanwhile
			}
		}
		return nil, nil, false
	})
	var wg sync.WaitGroup
	errs := make([]error, partitions)
	for p := range partitions {
		wg.Go(func() {
			_, errs[p] = cl.Read(ctx, "orders", int32(p), 0, func([]Rec) error { return nil })
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("%d reads asked for %s's metadata %d times, want once", partitions, topic, n)
	}
}

// TestSendReadWriter: a record sent with a Writer is read back with it
// (the header WriterHeader); one sent without has none.
func TestSendReadWriter(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := newClient(t, c, nil)
	ctx := timeout(t)
	if err := cl.Ensure(ctx, map[string]int32{"orders": 1}); err != nil {
		t.Fatal(err)
	}
	writer := []byte("0123456789abcdef")
	recs := []*Out{
		{Input: "orders", Key: []byte("a"), Value: []byte("v")},
		{Input: "orders", Key: []byte("b"), Value: []byte("v"), Writer: writer},
		{Input: "orders", Key: []byte("c"), Writer: writer}, // a tombstone
	}
	if err := cl.Send(recs)(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := readAll(t, cl, "orders", 0, 0)
	if len(got) != 3 {
		t.Fatalf("read %d records, want 3", len(got))
	}
	for i, r := range got {
		if !bytes.Equal(r.Writer, recs[i].Writer) {
			t.Errorf("record %s: writer %q, want %q", r.Key, r.Writer, recs[i].Writer)
		}
	}
	if got[2].Value != nil {
		t.Errorf("tombstone read with value %q", got[2].Value)
	}
}

// TestWatchMeta: WatchMeta returns the meta topic's records from an
// offset as soon as one is written (the broker holds the fetch until
// then, up to fetchMaxWait), nothing after fetchMaxWait when none is,
// and moves an offset past the end back to it (the topic recreated).
func TestWatchMeta(t *testing.T) {
	t.Parallel()
	cl, ctx := metaClient(t)
	if _, err := cl.WriteMeta(ctx, []byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	end, err := cl.MetaEnd(ctx)
	if err != nil || end != 1 {
		t.Fatalf("meta end %d, %v; want 1", end, err)
	}

	recs, next, err := cl.WatchMeta(ctx, end)
	if err != nil || len(recs) != 0 || next != end {
		t.Fatalf("watch at the end with nothing written: %d records, next %d, %v; want none, %d", len(recs), next, err, end)
	}

	written := make(chan error, 1)
	go func() {
		time.Sleep(50 * time.Millisecond) // the watch is waiting in the broker by then, or finds the record at once
		_, err := cl.WriteMeta(ctx, []byte("b"), []byte("2"))
		written <- err
	}()
	recs, next, err = cl.WatchMeta(ctx, end)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 {
		// The write landed after the broker answered the fetch: the next
		// watch has it.
		recs, next, err = cl.WatchMeta(ctx, next)
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(recs) != 1 || string(recs[0].Key) != "b" || string(recs[0].Value) != "2" || recs[0].Offset != 1 || next != 2 {
		t.Fatalf("watch from %d after a write: %+v, next %d; want b=2 at 1, next 2", end, recs, next)
	}

	if _, next, err = cl.WatchMeta(ctx, 10); err != nil || next != 2 {
		t.Fatalf("watch past the end (10): next %d, %v; want the end, 2", next, err)
	}
}
