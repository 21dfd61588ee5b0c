package snapshot

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"
)

// FuzzDecodeRecord checks the decoding invariants listed in the package
// documentation on arbitrary input: DecodeRecord never panics; a failure
// wraps ErrCorrupt; a decoded record shares no memory with its input; and
// it encodes back to bytes that decode to a deeply equal record.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range edgeRecords() {
		valid := AppendRecord(nil, &r)
		f.Add(valid)
		f.Add(valid[:len(valid)/2])          // truncated
		f.Add(valid[:len(valid)-1])          // truncated by one
		f.Add(append(bytes.Clone(valid), 0)) // trailing byte
		flipped := bytes.Clone(valid)
		flipped[len(flipped)/3] ^= 0x55 // corrupted
		f.Add(flipped)
		version := bytes.Clone(valid)
		version[0] = 2
		f.Add(version)
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRecord(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		enc := AppendRecord(nil, &r)
		for i := range b {
			b[i] ^= 0xff
		}
		if again := AppendRecord(nil, &r); !bytes.Equal(enc, again) {
			t.Fatal("decoded record aliases its input")
		}
		r2, err := DecodeRecord(enc)
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
	valid := appendQuarantined(nil, BucketPending, key8(7), "boom", time.Unix(1, 2), AppendRecord(nil, &r))
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
