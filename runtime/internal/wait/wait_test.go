package wait

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestWaits: each wait returns true when what it waits for comes within
// its bound, false when the bound (or ctx) ends first, and not before.
func TestWaits(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		began := time.Now()
		if !Sleep(context.Background(), time.Second) || time.Since(began) != time.Second {
			t.Errorf("Sleep: returned after %s", time.Since(began))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if Sleep(ctx, time.Minute) {
			t.Error("Sleep reported the minute passed though ctx ended after a second")
		}
		ch := make(chan struct{})
		time.AfterFunc(time.Second, func() { close(ch) })
		if !ClosedWithin(ch, 2*time.Second) {
			t.Error("ClosedWithin: a channel closed after 1s was not seen within 2s")
		}
		if ClosedWithin(make(chan struct{}), time.Second) {
			t.Error("ClosedWithin: an open channel reported closed")
		}
		if !Within(2*time.Second, func() { time.Sleep(time.Second) }) {
			t.Error("Within: a 1s call did not return within 2s")
		}
		hung := make(chan struct{})
		if Within(time.Second, func() { <-hung }) {
			t.Error("Within: a hung call reported returned")
		}
		close(hung) // the call left running ends inside the bubble
	})
}
