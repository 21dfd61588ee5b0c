package kclient

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// TestChunking: a partition's chunks, with the one its reader fills and
// the one its fetch loop takes from, hold about FetchQueue records: never
// more (but for a FetchQueue under 3, which still needs one of each), and
// less by at most two chunks.
func TestChunking(t *testing.T) {
	for fq := 1; fq <= 5000; fq++ {
		size, depth := chunking(fq)
		if size < 1 || size > maxChunk || depth < 1 {
			t.Fatalf("FetchQueue %d: chunks of %d, %d deep", fq, size, depth)
		}
		total := size * (depth + 2)
		if total > max(fq, 3) || total < fq-2*maxChunk {
			t.Fatalf("FetchQueue %d: chunks of %d, %d deep: %d records ahead", fq, size, depth, total)
		}
	}
}

// TestChunkedSource: a fetch response's records reach the fetch loop in
// offset order, in chunks of the source's size and the rest at the
// response's end, from the offset asked for on; Ready counts what the
// chunk Next takes from has left, taking the next chunk when it is done;
// a chunk done with goes back to the reader cleared; Next gives up once
// its context ends.
func TestChunkedSource(t *testing.T) {
	var recs []kafka.Record
	for off := int64(5); off < 15; off++ {
		v := fmt.Appendf(nil, "v%d", off)
		recs = append(recs, kafka.Record{Offset: off, Key: kafka.NewBytes([]byte("k")), Value: kafka.NewBytes(v)})
	}
	chunks := make(chan []Record, 4)
	src := &kafkaGoSource{chunks: chunks, out: chunkOut{chunks: chunks, free: make(chan []Record, 6), size: 3}}
	ctx := context.Background()
	next, _, err := sendRecords(ctx, fetched{records: kafka.NewRecordReader(recs...), end: 15}, 7, src.out, new(recordBytes))
	if err != nil || next != 15 {
		t.Fatalf("sendRecords: offset %d, %v; want 15, nil", next, err)
	}
	if len(chunks) != 3 {
		t.Fatalf("%d chunks sent, want 3 (7-9, 10-12, 13-14)", len(chunks))
	}
	wantReady := []int{3, 2, 1, 3, 2, 1, 2, 1}
	for i, off := 0, int64(7); off < 15; i, off = i+1, off+1 {
		if got := src.Ready(); got != wantReady[i] {
			t.Errorf("before offset %d: Ready %d, want %d", off, got, wantReady[i])
		}
		r, ok := src.Next(ctx)
		if !ok || r.Offset != off || string(r.Value) != fmt.Sprint("v", off) || r.End != 15 {
			t.Fatalf("Next: %+v, %v; want offset %d", r, ok, off)
		}
		if off == 10 { // the first chunk is back, cleared
			if len(src.out.free) != 1 {
				t.Fatalf("%d chunks given back after the first, want 1", len(src.out.free))
			}
			c := <-src.out.free
			for j, r := range c[:cap(c)] {
				if r.Offset != 0 || r.Value != nil {
					t.Errorf("given-back chunk's record %d not cleared: %+v", j, r)
				}
			}
			if len(c) != 0 {
				t.Errorf("given-back chunk has %d records, want 0", len(c))
			}
		}
	}
	if got := src.Ready(); got != 0 {
		t.Errorf("Ready %d after the last, want 0", got)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if r, ok := src.Next(cctx); ok {
		t.Errorf("Next after its context ended: %+v", r)
	}
}

var bytesSink protocol.Bytes

// TestReadKeyValue: a record's key and value come out as they were, a
// null one nil and an empty one empty, carved from shared blocks, each
// capped so that appending to it leaves the others alone.
func TestReadKeyValue(t *testing.T) {
	b := func(s string) protocol.Bytes { return protocol.NewBytes([]byte(s)) }
	for _, c := range []struct {
		name       string
		k, v       protocol.Bytes
		key, value []byte
	}{
		{"empty", b(""), b(""), []byte{}, []byte{}}, // first: on a reader's first block
		{"both", b("k1"), b("value"), []byte("k1"), []byte("value")},
		{"null key", nil, b("value"), nil, []byte("value")},
		{"null value", b("k1"), nil, []byte("k1"), nil},
		{"both null", nil, nil, nil, nil},
		{"large", b(strings.Repeat("k", recordBlockSize/8)), b(strings.Repeat("v", recordBlockSize/4)),
			[]byte(strings.Repeat("k", recordBlockSize/8)), []byte(strings.Repeat("v", recordBlockSize/4))},
	} {
		var rb recordBytes
		key, value, err := readKeyValue(c.k, c.v, &rb)
		if err != nil || !bytes.Equal(key, c.key) || !bytes.Equal(value, c.value) ||
			(key == nil) != (c.key == nil) || (value == nil) != (c.value == nil) {
			t.Errorf("%s: %q, %q, %v; want %q, %q", c.name, key, value, err, c.key, c.value)
			continue
		}
		// The next record's bytes come from the same block.
		nextKey, nextValue, err := readKeyValue(b("next-key"), b("next-value"), &rb)
		if err != nil {
			t.Fatal(err)
		}
		_ = append(key, 'X')
		_ = append(value, 'Y')
		if !bytes.Equal(value, c.value) || string(nextKey) != "next-key" || string(nextValue) != "next-value" {
			t.Errorf("%s: appending to the key and value changed the value to %q, the next record's to %q, %q", c.name, value, nextKey, nextValue)
		}
	}

	// Many records share an allocation; a block's bytes are never
	// handed out twice.
	k, v := []byte("customer-42"), []byte(strings.Repeat("a value of some length ", 11)) // 253 bytes
	var rb recordBytes
	made := testing.AllocsPerRun(1000, func() { bytesSink, bytesSink = protocol.NewBytes(k), protocol.NewBytes(v) })
	n := testing.AllocsPerRun(1000, func() {
		if _, _, err := readKeyValue(protocol.NewBytes(k), protocol.NewBytes(v), &rb); err != nil {
			t.Fatal(err)
		}
	})
	if n-made != 0 {
		t.Errorf("%.0f allocations a record besides the test's Bytes, want 0 (a block every %d records)", n-made, recordBlockSize/(len(k)+len(v)))
	}
	var prev []byte
	for i := range 200 {
		key, value, err := readKeyValue(b(fmt.Sprint("key-", i)), b(fmt.Sprint("value-", i)), &rb)
		if err != nil {
			t.Fatal(err)
		}
		if prev != nil && string(prev) != fmt.Sprint("value-", i-1) {
			t.Fatalf("record %d's value became %q after record %d was read", i-1, prev, i)
		}
		if string(key) != fmt.Sprint("key-", i) {
			t.Fatalf("record %d: key %q", i, key)
		}
		prev = value
	}
}

// TestEmptyFetchMakesNoChunk: a fetch that brought no record (a long
// poll of an idle partition, every FetchMaxWait) sends nothing and
// allocates no chunk.
func TestEmptyFetchMakesNoChunk(t *testing.T) {
	chunks := make(chan []Record, 1)
	out := chunkOut{chunks: chunks, free: make(chan []Record, 3), size: 64}
	resp := fetched{end: 7}
	n := testing.AllocsPerRun(100, func() {
		resp.records = emptyRecords{}
		next, _, err := sendRecords(context.Background(), resp, 7, out, new(recordBytes))
		if err != nil || next != 7 {
			t.Fatalf("sendRecords: %d, %v; want 7, nil", next, err)
		}
	})
	if len(chunks) != 0 {
		t.Errorf("%d chunks sent for an empty fetch", len(chunks))
	}
	if n != 0 {
		t.Errorf("%.0f allocations for an empty fetch, want 0", n)
	}
}

// emptyRecords is a fetch response's record stream without records.
type emptyRecords struct{}

func (emptyRecords) ReadRecord() (*kafka.Record, error) { return nil, io.EOF }
