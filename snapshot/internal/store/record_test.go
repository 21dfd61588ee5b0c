package store

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

// edgeRecords covers nil against empty, zero values and extremes.
func edgeRecords() map[string]Record {
	return map[string]Record{
		"zero": {},
		"now": {SavedAt: time.Now(), FirstFailed: time.Now().In(time.FixedZone("z", 5*3600)),
			Message: handoff.Message{FirstSeen: time.Now().In(time.FixedZone("y", -3600)), Timestamp: time.Now()}}, // monotonic reading, zones
		"full": fullRecord(3),
		"empty not nil": {Message: handoff.Message{
			Key: []byte{}, Value: []byte{}, Headers: []handoff.Header{},
		}},
		"nil header values": {Message: handoff.Message{
			Headers: []handoff.Header{{Key: "k"}, {Key: "k", Value: []byte{}}, {}},
		}},
		"many headers": {Message: handoff.Message{Headers: manyHeaders(300)}},
		"extremes": {Message: handoff.Message{
			Origin:    handoff.Origin{Topic: "t", Partition: -1 << 62, Offset: -1 << 63},
			Attempt:   1<<62 + 5,
			FirstSeen: time.Unix(0, 0), // the epoch is not the zero time
			Timestamp: time.Unix(-1, 0),
			Value:     []byte{0},
		}, SavedAt: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), FirstFailed: time.Unix(-1, 0), Redeliveries: -1 << 62},
		"far past": {
			SavedAt:     time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), // one nanosecond after the zero time
			FirstFailed: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Add(-time.Nanosecond),
			Message:     handoff.Message{FirstSeen: time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)},
		},
	}
}

func manyHeaders(n int) []handoff.Header {
	h := make([]handoff.Header, n)
	for i := range h {
		h[i] = handoff.Header{Key: strings.Repeat("h", i%17), Value: bytes.Repeat([]byte{byte(i)}, i%5)}
		if i%7 == 0 {
			h[i].Value = nil
		}
	}
	return h
}

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	for name, r := range edgeRecords() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := appendRecord(nil, &r)
			if b[0] != recordVersion {
				t.Fatalf("first byte %d, want version %d", b[0], recordVersion)
			}
			if n := maxEncodedSize(&r); len(b) > n {
				t.Fatalf("encoded %d bytes, bound %d", len(b), n)
			}
			got, err := decodeRecord(b)
			if err != nil {
				t.Fatal(err)
			}
			requireEqualRecord(t, got, r)
			if !got.SavedAt.Equal(r.SavedAt) || !got.Message.FirstSeen.Equal(r.Message.FirstSeen) || !got.FirstFailed.Equal(r.FirstFailed) {
				t.Fatalf("times differ: %v %v %v, want %v %v %v", got.SavedAt, got.Message.FirstSeen, got.FirstFailed,
					r.SavedAt, r.Message.FirstSeen, r.FirstFailed)
			}
			// The zero time comes back as time.Time{} itself.
			if r.SavedAt.IsZero() && got.SavedAt != (time.Time{}) {
				t.Fatalf("zero SavedAt decoded as %#v", got.SavedAt)
			}
			if r.FirstFailed.IsZero() && got.FirstFailed != (time.Time{}) {
				t.Fatalf("zero FirstFailed decoded as %#v", got.FirstFailed)
			}

			// Nothing aliases the input.
			before := appendRecord(nil, &got)
			for i := range b {
				b[i] ^= 0xff
			}
			if after := appendRecord(nil, &got); !bytes.Equal(before, after) {
				t.Fatal("decoded record changed with its input bytes")
			}
		})
	}
}

func TestAppendRecordAppends(t *testing.T) {
	t.Parallel()
	r1, r2 := fullRecord(1), fullRecord(2)
	b := appendRecord([]byte("prefix"), &r1)
	n := len(b)
	b = appendRecord(b, &r2)
	if !bytes.HasPrefix(b, []byte("prefix")) {
		t.Fatal("prefix overwritten")
	}
	got, err := decodeRecord(b[len("prefix"):n])
	if err != nil {
		t.Fatal(err)
	}
	requireEqualRecord(t, got, r1)
	got, err = decodeRecord(b[n:])
	if err != nil {
		t.Fatal(err)
	}
	requireEqualRecord(t, got, r2)
}

// TestDecodeRecordDecodedSlicesAreCapped checks that appending to one
// decoded field cannot write over the next.
func TestDecodeRecordDecodedSlicesAreCapped(t *testing.T) {
	t.Parallel()
	r := fullRecord(1)
	got, err := decodeRecord(appendRecord(nil, &r))
	if err != nil {
		t.Fatal(err)
	}
	_ = append(got.Message.Key, "xxxxxxxx"...)
	_ = append(got.Message.Headers[0].Value, "xxxxxxxx"...)
	requireEqualRecord(t, got, r)
}

func TestDecodeRecordPrefixes(t *testing.T) {
	t.Parallel()
	for name, r := range edgeRecords() {
		b := appendRecord(nil, &r)
		for n := range len(b) {
			_, err := decodeRecord(b[:n])
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s: prefix of %d/%d bytes: err = %v, want ErrCorrupt", name, n, len(b), err)
			}
		}
	}
}

func TestDecodeRecordCorrupt(t *testing.T) {
	t.Parallel()
	r := fullRecord(1)
	valid := appendRecord(nil, &r)
	with := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(valid)) }
	for name, tc := range map[string]struct {
		b    []byte
		want string
	}{
		"empty":            {nil, "empty"},
		"version 0":        {with(func(b []byte) []byte { b[0] = 0; return b }), "unknown format version 0"},
		"version 3":        {with(func(b []byte) []byte { b[0] = 3; return b }), "unknown format version 3"},
		"flipped version":  {with(func(b []byte) []byte { b[0] ^= 0xff; return b }), "unknown format version 253"},
		"trailing byte":    {append(bytes.Clone(valid), 0), "1 trailing bytes"},
		"huge length":      {[]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, "id length 18446744073709551615 exceeds"},
		"varint overflow":  {[]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, "id length overflows"},
		"header count":     {[]byte{1, 0, 0, 0, 0, 0xff, 0xff, 0x03}, "header count"},
		"bad time tag":     {[]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7}, "first seen has unknown tag 7"},
		"nanos over 1e9":   {[]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0x80, 0x94, 0xeb, 0xdc, 0x03}, "nanoseconds 1000000000 out of range"},
		"truncated string": {[]byte{1, 5, 'a'}, "id length 5 exceeds the 1 bytes left"},
	} {
		_, err := decodeRecord(tc.b)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want ErrCorrupt containing %q", name, err, tc.want)
		}
	}
}

func TestDecodeErrorMessage(t *testing.T) {
	t.Parallel()
	_, cause := decodeRecord([]byte{9})
	err := error(&DecodeError{Bucket: BucketPending, Key: key8(42), Err: cause})
	want := "snapshot: decode pending/000000000000002a: snapshot: corrupt record: unknown format version 9"
	if err.Error() != want {
		t.Fatalf("got %q\nwant %q", err, want)
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Fatal("DecodeError does not wrap ErrCorrupt")
	}
}

func TestQuarantinedRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, raw := range [][]byte{nil, {}, []byte("garbage"), {1, 2, 3}} {
		b := appendQuarantined(nil, BucketPending, []byte{0, 1}, "boom", at, raw)
		q, err := decodeQuarantined(b)
		if err != nil {
			t.Fatal(err)
		}
		want := Quarantined{Bucket: BucketPending, OrigKey: []byte{0, 1}, Err: "boom", At: at, Raw: raw}
		if want.Raw == nil {
			want.Raw = []byte{}
		}
		if !reflect.DeepEqual(q, want) {
			t.Fatalf("got %#v, want %#v", q, want)
		}
		for n := range len(b) - len(raw) {
			if _, err := decodeQuarantined(b[:n]); err == nil {
				t.Fatalf("prefix of %d bytes decoded", n)
			}
		}
	}
}

// TestDecodeRecordExported: DecodeRecord is decodeRecord: a stored
// record decodes whole, an empty value (a tombstone) and a cut one are
// corrupt.
func TestDecodeRecordExported(t *testing.T) {
	t.Parallel()
	r := fullRecord(3)
	b := appendRecord(nil, &r)
	got, err := DecodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	requireEqualRecord(t, got, r)
	for name, bad := range map[string][]byte{"empty": nil, "cut": b[:len(b)-1]} {
		if _, err := DecodeRecord(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err %v, want ErrCorrupt", name, err)
		}
	}
}
