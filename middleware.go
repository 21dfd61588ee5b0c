package handoff

// Middleware wraps a handler: it returns a handler that does something
// before and after calling next, or instead of it. The runtime takes
// middleware for all classes (runtime.Config.Middleware) and per class
// (runtime.Class.Middleware) and composes them once, at runtime.New.
//
// Each attempt of a message passes through the whole chain once: a retry
// in place, a delayed redelivery, a re-push after a restart and a
// requeued dead letter are each a new call of the outermost handler, with
// Message.Attempt counting the attempts that failed before it. A message
// the runtime does not run (parked behind its key, delayed by its
// deliver-at header) does not reach the middleware.
//
// What the chain returns is the attempt's result, classified by the
// class's retry policy as the handler's would be: nil is done, an error
// made with [Permanent] goes to the dead letters, any other error is
// retried. A middleware may so turn a failure into a success, or a
// recoverable error into a permanent one. A panic in a middleware or in
// the handler becomes a [PanicError] outside the whole chain, so a
// middleware that must see it (to end a span, say) defers its cleanup.
//
// The context a middleware receives carries the class's Timeout deadline
// and the hard stop's cancellation: the whole chain runs inside the
// attempt's bound, never only the handler.
type Middleware func(next HandlerFunc) HandlerFunc

// Chain returns h wrapped in mw, the first outermost: Chain(h, a, b)
// runs a, which calls b, which calls h. It returns nil when a middleware
// returns nil, wherever it stands: wrapped by the ones outside it, that
// nil would make every call panic.
func Chain(h HandlerFunc, mw ...Middleware) HandlerFunc {
	for i := len(mw) - 1; i >= 0; i-- {
		if h = mw[i](h); h == nil {
			return nil
		}
	}
	return h
}
