package runtime

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(1, 2))
	for n, want := range []time.Duration{100, 200, 400, 800, 1600, 2000, 2000} {
		want *= time.Millisecond
		for range 200 {
			d := backoff(n+1, 100*time.Millisecond, 2*time.Second, rnd)
			if d < want/2 || d > want {
				t.Fatalf("retry %d: %s outside [%s, %s]", n+1, d, want/2, want)
			}
		}
	}
	if d := backoff(1, 0, 0, rnd); d != 0 {
		t.Errorf("zero backoff: %s", d)
	}
	// Large n must not overflow.
	if d := backoff(1000, time.Second, time.Minute, rnd); d < 30*time.Second || d > time.Minute {
		t.Errorf("retry 1000: %s", d)
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(3, 4))
	p := RetryPolicy{MaxAttempts: 3, Redeliveries: 2, RedeliveryDelay: 5 * time.Second}
	p.withDefaults()
	now := time.Now()
	errX := errors.New("x")
	type step struct {
		attempts, redeliveries int
		want                   verdict
		wait                   time.Duration // for redeliveries
	}
	for _, s := range []step{
		{1, 0, retryInPlace, 0},
		{2, 0, retryInPlace, 0},
		{3, 0, redeliverLater, 5 * time.Second},
		{4, 1, redeliverLater, 10 * time.Second},
		{5, 2, deadLetter, 0},
	} {
		v, d := p.decide(errX, s.attempts, s.redeliveries, now, now, rnd)
		if v != s.want || (v == redeliverLater && d != s.wait) {
			t.Errorf("attempts %d redeliveries %d: got %v %s, want %v %s", s.attempts, s.redeliveries, v, d, s.want, s.wait)
		}
	}
	if v, _ := p.decide(handoff.Permanent(errX), 1, 0, now, now, rnd); v != deadLetter {
		t.Error("permanent error retried")
	}
	p.PermanentFunc = func(err error) bool { return errors.Is(err, errX) }
	if v, _ := p.decide(errX, 1, 0, now, now, rnd); v != deadLetter {
		t.Error("classified permanent error retried")
	}
	q := RetryPolicy{MaxAttempts: 10, MaxElapsed: time.Minute}
	q.withDefaults()
	if v, _ := q.decide(errX, 2, 0, now.Add(-2*time.Minute), now, rnd); v != deadLetter {
		t.Error("MaxElapsed did not stop the retries")
	}
}
