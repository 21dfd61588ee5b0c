package handoff

import (
	"errors"
	"fmt"
)

// PermanentError marks a failure that retrying cannot fix. Wrap an error
// with [Permanent]; test for one with errors.As or [IsPermanent].
type PermanentError struct {
	Err error
}

func (e *PermanentError) Error() string {
	if e.Err == nil {
		return "permanent error"
	}
	return "permanent: " + e.Err.Error()
}

func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that the runtime sends the message straight to
// the dead letters instead of retrying it.
func Permanent(err error) error { return &PermanentError{Err: err} }

// IsPermanent reports whether err, or any error it wraps, was made by
// [Permanent].
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// PanicError is the error a handler's panic becomes. The worker that ran
// the handler survives.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("handoff: handler panicked: %v", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// UnavailableError marks a failure caused by something outside the
// message that is down (a database, a downstream service): retrying this
// message alone cannot help until it is back. Wrap an error with
// [Unavailable]; test for one with errors.As or [IsUnavailable].
type UnavailableError struct {
	Err error
}

func (e *UnavailableError) Error() string {
	if e.Err == nil {
		return "unavailable"
	}
	return "unavailable: " + e.Err.Error()
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Unavailable wraps err so that the runtime suspends the message's class
// at once instead of counting an attempt: the class stops taking new
// messages, keeps the ones it holds with their attempt counts, and one
// probe retries a held message with backoff until a handler succeeds
// again. A [Permanent] error inside it stays permanent.
func Unavailable(err error) error { return &UnavailableError{Err: err} }

// IsUnavailable reports whether err, or any error it wraps, was made by
// [Unavailable] (and is not also [Permanent]).
func IsUnavailable(err error) bool {
	var u *UnavailableError
	return errors.As(err, &u) && !IsPermanent(err)
}
