package admin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// ShutdownTimeout is how long [Serve] lets requests in progress finish
// once its context ends, before it closes their connections.
const ShutdownTimeout = 5 * time.Second

// The defaults of [Options] ReadTimeout, WriteTimeout, IdleTimeout and
// MaxPreLogin, and the bound of every request body.
const (
	// DefaultReadTimeout bounds the whole request, its body included: a
	// body of MaxBodyBytes takes well under a second on any link an
	// operator uses; a client that trickles one is cut off.
	DefaultReadTimeout = 15 * time.Second
	// DefaultWriteTimeout bounds a request from the end of its headers
	// to the end of its answer: above the longest wait of a handler (a
	// read of the group's dead letters or operations, or a requeue
	// through another instance than the owner, 20s) with room to spare.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultIdleTimeout is how long a kept-alive connection may wait
	// for its next request.
	DefaultIdleTimeout = time.Minute
	// DefaultMaxPreLogin bounds the requests without a valid token or
	// session served at once.
	DefaultMaxPreLogin = 16
	// MaxBodyBytes bounds the body of every request: the forms and the
	// pause's JSON are far smaller. A larger body is refused with 413
	// without being read past the bound.
	MaxBodyBytes = 64 << 10
)

// Listen listens on addr (host:port) for the admin server. An address
// without a host (":9090") binds the loopback interface 127.0.0.1 only;
// name a host ("0.0.0.0:9090", "[::]:9090") to listen elsewhere, and then
// put the admin endpoints behind a network policy: reading needs no token.
func Listen(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("admin: listen on %q: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	return ln, nil
}

// Serve serves h on ln until ctx ends, then shuts the server down: it
// stops accepting, lets requests in progress finish for up to
// [ShutdownTimeout] and closes the rest. It blocks until the server is
// down, closes ln, and returns nil after a clean shutdown, or the error
// that ended serving early.
//
// The server waits at most 10s for a request's headers, and closes a
// connection whose request takes longer than Options.ReadTimeout to
// arrive, whose answer is not written within Options.WriteTimeout, or
// that sits idle for Options.IdleTimeout: the Options of h when h is a
// handler of [NewHandler] or [NewProbeHandler] (not wrapped), else
// [DefaultReadTimeout], [DefaultWriteTimeout] and [DefaultIdleTimeout].
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := newServer(h)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("admin: serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		err = errors.Join(fmt.Errorf("admin: shut down the server on %s: %w", ln.Addr(), err), srv.Close())
	}
	<-served // http.ErrServerClosed
	return err
}

// ListenAndServe is [Listen] followed by [Serve].
func ListenAndServe(ctx context.Context, addr string, h http.Handler) error {
	ln, err := Listen(addr)
	if err != nil {
		return err
	}
	return Serve(ctx, ln, h)
}

// newServer returns the server Serve runs for h: the timeouts of h's
// Options when h is a handler of [NewHandler] or [NewProbeHandler], the
// defaults otherwise.
func newServer(h http.Handler) *http.Server {
	t := serverTimeouts{}
	if ah, ok := h.(*handler); ok {
		t = ah.timeouts
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       orDefault(t.read, DefaultReadTimeout),
		WriteTimeout:      orDefault(t.write, DefaultWriteTimeout),
		IdleTimeout:       orDefault(t.idle, DefaultIdleTimeout),
	}
}

// readHeaderTimeout bounds the arrival of a request's headers.
const readHeaderTimeout = 10 * time.Second

// serverTimeouts are Options' ReadTimeout, WriteTimeout and IdleTimeout.
type serverTimeouts struct{ read, write, idle time.Duration }

// orDefault returns d for zero (the default), 0 (none) for a negative d,
// else d.
func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}
