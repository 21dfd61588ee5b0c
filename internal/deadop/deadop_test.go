package deadop

import (
	"errors"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 7, 17, 0, 0, 0, time.UTC)
	req := &Request{ID: "op1", Action: Requeue, IDs: []string{"3f2a9c01d4e5b6a7-12"}, Rate: 50, Who: "alice", Via: "cli", At: at}
	v, err := Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	rec, ok, err := Parse(RequestKey("op1"), v)
	if err != nil || !ok || rec.Kind != KindRequest || rec.Request.Rate != 50 || rec.Request.IDs[0] != req.IDs[0] || !rec.Request.At.Equal(at) {
		t.Fatalf("request: %+v %v %v", rec, ok, err)
	}
	v, _ = Encode(&Status{Instance: "b", State: Done, Done: 3, At: at})
	rec, ok, err = Parse(StatusKey("op1", "b"), v)
	if err != nil || !ok || rec.Kind != KindStatus || rec.Instance != "b" || rec.Status.Done != 3 {
		t.Fatalf("status: %+v %v %v", rec, ok, err)
	}
	rec, ok, err = Parse(CancelKey("op1"), nil)
	if err != nil || !ok || rec.Kind != KindCancel || rec.Cancel != nil {
		t.Fatalf("cancel tombstone: %+v %v %v", rec, ok, err)
	}
	if _, ok, err := Parse([]byte("pause/orders"), []byte(`{}`)); ok || err != nil {
		t.Fatalf("pause key taken: %v %v", ok, err)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct{ k, v string }{
		{"deadop/op1", `{"id":"op1","action":"delete","ids":["a-1"]}`},
		{"deadop/op1", `{"id":"op2","action":"requeue","ids":["a-1"]}`},
		{"deadop/op1", `{"id":"op1","action":"requeue","ids":[]}`},
		{"deadop/op1", `{"id":"op1","action":"requeue","ids":["a-1"],"rate":-1}`},
		{"deadop/op1", `not json`},
		{"deadop/op1/other", `{}`},
		{"deadop//cancel", `{}`},
	} {
		if _, ok, err := Parse([]byte(c.k), []byte(c.v)); !ok || !errors.Is(err, ErrBad) {
			t.Errorf("Parse(%s, %s) = %v, %v; want ErrBad", c.k, c.v, ok, err)
		}
	}
}

func TestSum(t *testing.T) {
	req := &Request{ID: "op", Action: Discard, IDs: []string{"a-1", "a-2", "b-1", "b-2"}}
	p := Sum(req, nil, []Status{{Instance: "a", State: Done, Done: 2}})
	if p.Over || p.Unreported != 2 {
		t.Fatalf("half reported: %+v", p)
	}
	p = Sum(req, nil, []Status{{Instance: "a", State: Done, Done: 2}, {Instance: "b", State: Done, Done: 1, Skipped: 1}})
	if !p.Over || p.Done != 3 || p.Unreported != 0 {
		t.Fatalf("all reported: %+v", p)
	}
	if p = Sum(req, &Cancel{Who: "x"}, nil); !p.Over {
		t.Fatalf("cancelled: %+v", p)
	}
}
