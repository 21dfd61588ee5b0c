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
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
	}
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
