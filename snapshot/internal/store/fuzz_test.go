package store

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"
)

// FuzzDecodeRecord checks the decoding invariants listed in the package
// documentation on arbitrary input: decodeRecord never panics; a failure
// wraps ErrCorrupt; a decoded record shares no memory with its input; and
// it encodes back to bytes that decode to a deeply equal record. The
// in-place decoder that ScanPending uses returns the same.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range edgeRecords() {
		valid := appendRecord(nil, &r)
		f.Add(valid)
		f.Add(valid[:len(valid)/2])          // truncated
		f.Add(valid[:len(valid)-1])          // truncated by one
		f.Add(append(bytes.Clone(valid), 0)) // trailing byte
		flipped := bytes.Clone(valid)
		flipped[len(flipped)/3] ^= 0x55 // corrupted
		f.Add(flipped)
		for _, v := range []byte{recordV1, recordVersion + 1} { // format 1 then reads a timestamp as the attempt; an unknown version
			version := bytes.Clone(valid)
			version[0] = v
			f.Add(version)
		}
	}
	// Both versions the decoder reads: format-1 records as format 1
	// wrote them (testdata/v1.state), each also cut short and with its
	// version byte changed to 2 (then the timestamp is missing) and to 3.
	for _, v1 := range v1Values(f) {
		f.Add(v1)
		f.Add(v1[:len(v1)-1])
		for _, version := range []byte{recordV2, recordVersion + 1} {
			b := bytes.Clone(v1)
			b[0] = version
			f.Add(b)
		}
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{2})
	in := newInterner() // shared by every input, as by the records of a scan
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b)
		// The in-place decoder of ScanPending agrees, interned strings or not.
		owned, ownedErr := decodeOwned(bytes.Clone(b), in)
		if fmt.Sprint(err) != fmt.Sprint(ownedErr) || !reflect.DeepEqual(r, owned) {
			t.Fatalf("decodeOwned disagrees with decodeRecord\ndecodeRecord: %#v, %v\ndecodeOwned:  %#v, %v", r, err, owned, ownedErr)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		enc := appendRecord(nil, &r)
		for i := range b {
			b[i] ^= 0xff
		}
		if again := appendRecord(nil, &r); !bytes.Equal(enc, again) {
			t.Fatal("decoded record aliases its input")
		}
		r2, err := decodeRecord(enc)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip changed the record\nfirst:  %#v\nsecond: %#v", r, r2)
		}
	})
}

// FuzzDecodeQuarantined checks the same invariants for quarantine
// entries.
func FuzzDecodeQuarantined(f *testing.F) {
	r := fullRecord(1)
	valid := appendQuarantined(nil, BucketPending, key8(7), "boom", time.Unix(1, 2), appendRecord(nil, &r))
	f.Add(valid)
	f.Add(valid[:20])
	f.Add(appendQuarantined(nil, "", nil, "", time.Time{}, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := decodeQuarantined(b)
		if err != nil {
			return
		}
		enc := appendQuarantined(nil, q.Bucket, q.OrigKey, q.Err, q.At, q.Raw)
		for i := range b {
			b[i] ^= 0xff
		}
		if again := appendQuarantined(nil, q.Bucket, q.OrigKey, q.Err, q.At, q.Raw); !bytes.Equal(enc, again) {
			t.Fatal("decoded entry aliases its input")
		}
		q2, err := decodeQuarantined(enc)
		if err != nil {
			t.Fatalf("re-encoded entry does not decode: %v", err)
		}
		if !reflect.DeepEqual(q, q2) {
			t.Fatalf("round trip changed the entry\nfirst:  %#v\nsecond: %#v", q, q2)
		}
	})
}

// FuzzParkedKey checks the parked key decoder that ParkedKeys relies on:
// it never panics; a failure wraps ErrCorrupt; what it returns shares no
// memory with its input; and a key that decodes encodes back to the very
// same bytes, so that Parked finds every record ParkedKeys counts.
func FuzzParkedKey(f *testing.F) {
	for _, k := range [][]byte{
		appendParkedKey(nil, "orders", []byte("customer-42"), 1),
		appendParkedKey(nil, "", nil, 0),
		appendParkedKey(nil, "a", bytes.Repeat([]byte{0xff}, 200), math.MaxUint64), // two-byte length
	} {
		f.Add(k)
		f.Add(k[:len(k)-1])              // truncated sequence
		f.Add(k[:2])                     // truncated
		f.Add(append(bytes.Clone(k), 0)) // trailing byte
		flipped := bytes.Clone(k)
		flipped[0] ^= 0x55 // corrupted length
		f.Add(flipped)
	}
	f.Add([]byte{0x80, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 1}) // length not in shortest form
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		class, key, seq, err := parseParkedKey(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if key != nil && len(key) == 0 {
			t.Fatal("empty key returned as non-nil")
		}
		enc := appendParkedKey(nil, class, key, seq)
		if !bytes.Equal(enc, b) {
			t.Fatalf("key %x decodes to (%q, %x, %d), which encodes to %x", b, class, key, seq, enc)
		}
		for i := range b {
			b[i] ^= 0xff
		}
		if again := appendParkedKey(nil, class, key, seq); !bytes.Equal(enc, again) {
			t.Fatal("decoded key aliases its input")
		}
	})
}
