package runtime

import (
	"math/rand/v2"
	"time"

	"github.com/handoff-go/handoff"
)

// Defaults of [RetryPolicy].
const (
	DefaultMaxAttempts     = 3
	DefaultInitialBackoff  = 100 * time.Millisecond
	DefaultMaxBackoff      = 5 * time.Second
	DefaultRedeliveryDelay = 5 * time.Second
)

// RetryPolicy is a class's answer to a handler error. A returned error is
// recoverable unless it is [handoff.Permanent] or the class's PermanentFunc
// says so. A recoverable failure is retried in place, after an exponential
// backoff with jitter that holds no worker, up to MaxAttempts attempts or
// MaxElapsed since the first failure; then the message gets Redeliveries
// persisted delayed redeliveries (RedeliveryDelay, doubling each time), and
// after those it becomes a dead letter. A permanent failure becomes a dead
// letter at once.
//
// Each redelivery is one attempt, with no retries in place after it: a
// message that keeps failing recoverably is handled MaxAttempts +
// Redeliveries times before it becomes a dead letter (3 attempts and 2
// redeliveries make 5 handler calls), and the dead letter's attempt count
// says so.
type RetryPolicy struct {
	// MaxAttempts bounds the attempts in place, the first included. Zero
	// means 3; 1 means no retry in place.
	MaxAttempts int

	// MaxElapsed stops the retries in place once this long has passed
	// since the first failure. Zero means no limit but MaxAttempts.
	MaxElapsed time.Duration

	// InitialBackoff is the wait before the first retry; each retry doubles
	// it, up to MaxBackoff. The actual wait is drawn in [d/2, d] (equal
	// jitter) so that failing messages spread out. Zero means 100ms.
	InitialBackoff time.Duration

	// MaxBackoff caps the wait between retries in place. Zero means 5s.
	MaxBackoff time.Duration

	// Redeliveries is how many persisted delayed redeliveries a message
	// gets once its retries in place are exhausted, before it becomes a
	// dead letter. They are stored in the state file, so a restart loses
	// none. Zero means none.
	Redeliveries int

	// RedeliveryDelay is the wait before the first redelivery; each one
	// doubles it (5s, 10s, 20s, ...). Zero means 5s.
	RedeliveryDelay time.Duration

	// PermanentFunc, if set, classifies errors the handler returns: true
	// means retrying cannot help and the message goes straight to the
	// dead letters. [handoff.Permanent] errors are permanent regardless.
	PermanentFunc func(error) bool
}

func (p *RetryPolicy) withDefaults() {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.InitialBackoff == 0 {
		p.InitialBackoff = DefaultInitialBackoff
	}
	if p.MaxBackoff == 0 {
		p.MaxBackoff = DefaultMaxBackoff
	}
	if p.RedeliveryDelay == 0 {
		p.RedeliveryDelay = DefaultRedeliveryDelay
	}
}

func (p *RetryPolicy) validate(class string, bad func(string, ...any)) {
	if p.MaxAttempts < 0 {
		bad("class %q: Retry.MaxAttempts must be > 0, got %d", class, p.MaxAttempts)
	}
	if p.Redeliveries < 0 {
		bad("class %q: Retry.Redeliveries must not be negative, got %d", class, p.Redeliveries)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"MaxElapsed", p.MaxElapsed}, {"InitialBackoff", p.InitialBackoff}, {"MaxBackoff", p.MaxBackoff}, {"RedeliveryDelay", p.RedeliveryDelay}} {
		if d.v < 0 {
			bad("class %q: Retry.%s must not be negative, got %s", class, d.name, d.v)
		}
	}
	if p.MaxBackoff > 0 && p.InitialBackoff > p.MaxBackoff {
		bad("class %q: Retry.InitialBackoff %s is above Retry.MaxBackoff %s", class, p.InitialBackoff, p.MaxBackoff)
	}
}

// backoff is the wait before retry number n (1 = the first retry):
// min(max, initial×2^(n-1)), drawn in [d/2, d]. A nil rnd uses the
// package-level generator of math/rand/v2.
func backoff(n int, initial, maxWait time.Duration, rnd *rand.Rand) time.Duration {
	d := initial
	for i := 1; i < n && d < maxWait; i++ {
		d *= 2
	}
	d = min(d, maxWait)
	half := d / 2
	if half <= 0 {
		return d
	}
	if rnd == nil {
		return half + time.Duration(rand.Int64N(int64(d-half)+1))
	}
	return half + time.Duration(rnd.Int64N(int64(d-half)+1))
}

// verdict is what happens to a message after a failed attempt.
type verdict uint8

const (
	retryInPlace verdict = iota
	redeliverLater
	deadLetter
)

// decide applies the policy to a message whose latest attempt failed with
// err. attempts counts every failed attempt, this one included;
// redeliveries counts the delayed redeliveries it already had. It returns
// the verdict and, for the first two, the wait.
func (p *RetryPolicy) decide(err error, attempts, redeliveries int, firstFailed, now time.Time, rnd *rand.Rand) (verdict, time.Duration) {
	if handoff.IsPermanent(err) || (p.PermanentFunc != nil && p.PermanentFunc(err)) {
		return deadLetter, 0
	}
	if redeliveries == 0 && attempts < p.MaxAttempts && (p.MaxElapsed == 0 || now.Sub(firstFailed) < p.MaxElapsed) {
		return retryInPlace, backoff(attempts, p.InitialBackoff, p.MaxBackoff, rnd)
	}
	if redeliveries < p.Redeliveries {
		d := p.RedeliveryDelay
		for range redeliveries {
			d *= 2
		}
		return redeliverLater, d
	}
	return deadLetter, 0
}

// probeBackoff is backoff without a source of its own, for a class's
// hold: the wait before probe n of a suspension.
func probeBackoff(n int, initial, maxWait time.Duration) time.Duration {
	return backoff(n, initial, maxWait, nil)
}
