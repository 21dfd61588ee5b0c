package pool

import "errors"

// ErrStopped is returned by [Pool.Submit] once [Pool.Stop] has begun,
// including to a Submit that was already waiting for room. The item was not
// accepted.
var ErrStopped = errors.New("pool: stopped")

// ErrHardStop is the cause [Pool.Stop] gives the handlers' context when it
// is called with a nil cause. Handlers see it through context.Cause.
var ErrHardStop = errors.New("pool: hard stop")

// errGoexit is what a handler that called runtime.Goexit (t.FailNow in a
// test, for instance) is reported as: its goroutine is gone, but its item
// is still accounted for.
var errGoexit = errors.New("pool: handler exited its goroutine (runtime.Goexit)")
