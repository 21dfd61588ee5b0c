package deadop

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzParse feeds Parse the meta topic's keys and values, valid,
// truncated and corrupted: it reads what the topic holds, written by
// any version of any instance, or by hand. Invariants:
//
//   - Parse never panics;
//   - ok is true exactly for the keys under "deadop/"; for the others
//     the record is zero and err nil (a pause's record is not an
//     error);
//   - an error wraps ErrBad;
//   - a record without an error names its operation (no "/" in it),
//     its kind, and its key is the one RequestKey, CancelKey or
//     StatusKey gives for them, so one key per record: a tombstone
//     written under that key deletes it;
//   - a tombstone decodes with no value set, any other value with
//     exactly the one of its kind; a request Validates and carries the
//     key's operation ID;
//   - what decodes encodes again (Encode) to a value that parses to the
//     same record.
func FuzzParse(f *testing.F) {
	at := time.Date(2026, 12, 7, 17, 0, 0, 0, time.UTC)
	req, _ := Encode(&Request{ID: "20261207T170000Z-3f2a9c01", Action: Requeue, IDs: []string{"3f2a9c01d4e5b6a7-12", "3f2a9c01d4e5b6a7-13"},
		Filter: Filter{Class: "orders", ErrorContains: "timeout", Since: at}, Rate: 20, Limit: 2, Who: "alice", Via: "cli", At: at,
		StartAt: at.Add(1500 * time.Millisecond)})
	reqOp, _ := Encode(&Request{ID: "op", Action: Discard, IDs: []string{"a-1"}, Who: "alice", Via: "b", At: at})
	cancel, _ := Encode(&Cancel{Who: "bob", At: at})
	status, _ := Encode(&Status{Instance: "b", State: Running, Done: 3, FailedAgain: 1, Left: 2, Rate: 7.5, Err: "x", At: at})
	for _, s := range []struct {
		k string
		v []byte
	}{
		{"deadop/20261207T170000Z-3f2a9c01", req},
		{"deadop/20261207T170000Z-3f2a9c01", req[:len(req)/2]},   // truncated
		{"deadop/20261207T170000Z-3f2a9c01", bytes.ToUpper(req)}, // corrupted
		{"deadop/other", req},                                    // another operation's request
		{"deadop/op/cancel", cancel},                             //
		{"deadop/op/cancel", cancel[:3]},                         //
		{"deadop/op/status/b", status},                           //
		{"deadop/op/status/b/c", status},                         // an instance name with a slash
		{"deadop/op/status/", status},                            // no instance
		{"deadop/op/", reqOp},                                    // a trailing slash
		{"deadop/op", reqOp},
		{"deadop/op/status/b", []byte(`{"done":"three"}`)},                 // wrong type
		{"deadop/op", []byte(`{"id":"op","action":"requeue","ids":null}`)}, //
		{"deadop/op", nil},                                                 // tombstone
		{"deadop/op/status/b", nil},                                        //
		{"deadop/", nil},                                                   //
		{"pause/orders", []byte(`{"reason":"x"}`)},                         // not an operation's
		{"", nil},
	} {
		f.Add([]byte(s.k), s.v)
	}
	f.Fuzz(func(t *testing.T, k, v []byte) {
		rec, ok, err := Parse(k, v)
		if ok != strings.HasPrefix(string(k), prefix) {
			t.Fatalf("ok %v for key %q", ok, k)
		}
		if !ok {
			if err != nil || rec != (Record{}) {
				t.Fatalf("key %q, not an operation's: %+v, %v", k, rec, err)
			}
			return
		}
		if err != nil {
			if !errors.Is(err, ErrBad) {
				t.Fatalf("error not ErrBad: %v", err)
			}
			return
		}
		if rec.Op == "" || strings.Contains(rec.Op, "/") {
			t.Fatalf("operation %q of key %q", rec.Op, k)
		}
		var key []byte
		var value any
		set := 0
		switch rec.Kind {
		case KindRequest:
			key = RequestKey(rec.Op)
			if rec.Request != nil {
				set++
				value = rec.Request
				if rec.Request.ID != rec.Op || rec.Request.Validate() != nil {
					t.Fatalf("request %+v under key %q: %v", rec.Request, k, rec.Request.Validate())
				}
			}
		case KindCancel:
			key = CancelKey(rec.Op)
			if rec.Cancel != nil {
				set++
				value = rec.Cancel
			}
		case KindStatus:
			if rec.Instance == "" {
				t.Fatalf("status of no instance under key %q", k)
			}
			key = StatusKey(rec.Op, rec.Instance)
			if rec.Status != nil {
				set++
				value = rec.Status
			}
		default:
			t.Fatalf("kind %q", rec.Kind)
		}
		if !bytes.Equal(key, k) {
			t.Fatalf("record %+v parsed from key %q, whose key is %q", rec, k, key)
		}
		if n := btoi(rec.Request != nil) + btoi(rec.Cancel != nil) + btoi(rec.Status != nil); n != set || (v == nil) != (set == 0) {
			t.Fatalf("value %q (nil %v) decoded to %d values, %d of its kind %s", v, v == nil, n, set, rec.Kind)
		}
		if v == nil {
			return
		}
		again, err := Encode(value)
		if err != nil {
			t.Fatalf("encode %+v: %v", value, err)
		}
		rec2, ok, err := Parse(k, again)
		if !ok || err != nil {
			t.Fatalf("re-encoded %q does not parse: %v", again, err)
		}
		var value2 any
		switch rec.Kind {
		case KindRequest:
			value2 = rec2.Request
		case KindCancel:
			value2 = rec2.Cancel
		case KindStatus:
			value2 = rec2.Status
		}
		if third, err := Encode(value2); err != nil || !bytes.Equal(third, again) {
			t.Fatalf("encode, parse, encode: %q then %q (%v)", again, third, err)
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
