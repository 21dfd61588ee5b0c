package devbroker

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// wireConn is one connection to a broker that speaks the Kafka wire
// protocol in kmsg requests and responses: the broker's own client for the
// requests it sends itself (a LeaveGroup for an expired member), and the
// tests' client for requests whose timing they must control. Requests are
// answered in the order they were sent. It is not safe for concurrent use.
type wireConn struct {
	conn net.Conn
	f    *kmsg.RequestFormatter
	sent int32 // correlation ID of the last request sent
	read int32 // correlation ID of the last response read
}

// dialWire connects to addr; ctx bounds the dial only.
func dialWire(ctx context.Context, addr, clientID string) (*wireConn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("devbroker: dial %s: %w", addr, err)
	}
	return &wireConn{conn: conn, f: kmsg.NewRequestFormatter(kmsg.FormatterClientID(clientID))}, nil
}

// Close closes the connection.
func (w *wireConn) Close() error { return w.conn.Close() }

// request sends req and returns its response. It blocks until the response
// arrives, ctx ends or the connection fails; all responses to requests sent
// earlier must have been read.
func (w *wireConn) request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	if err := w.send(ctx, req); err != nil {
		return nil, err
	}
	return w.receive(ctx, req)
}

// send writes req without waiting for its response.
func (w *wireConn) send(ctx context.Context, req kmsg.Request) error {
	defer w.bound(ctx)()
	w.sent++
	if _, err := w.conn.Write(w.f.AppendRequest(nil, req, w.sent)); err != nil {
		return w.fail(ctx, "send", req, err)
	}
	return nil
}

// receive reads the response to req, the oldest request sent and not yet
// answered.
func (w *wireConn) receive(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	defer w.bound(ctx)()
	var size [4]byte
	if _, err := io.ReadFull(w.conn, size[:]); err != nil {
		return nil, w.fail(ctx, "read response to", req, err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(w.conn, body); err != nil {
		return nil, w.fail(ctx, "read response to", req, err)
	}
	w.read++
	resp := req.ResponseKind()
	if len(body) < 4 || int32(binary.BigEndian.Uint32(body)) != w.read {
		return nil, fmt.Errorf("devbroker: response to %s: want correlation ID %d", kmsg.NameForKey(req.Key()), w.read)
	}
	body = body[4:]
	// A flexible response header ends in tagged fields; brokers send none
	// (ApiVersions keeps the old header).
	if resp.IsFlexible() && req.Key() != int16(kmsg.ApiVersions) {
		if len(body) == 0 || body[0] != 0 {
			return nil, fmt.Errorf("devbroker: response to %s: unexpected header tags", kmsg.NameForKey(req.Key()))
		}
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("devbroker: decode response to %s: %w", kmsg.NameForKey(req.Key()), err)
	}
	return resp, nil
}

// bound makes the connection's I/O give up at ctx's deadline or when ctx
// is cancelled, until the returned function is called.
func (w *wireConn) bound(ctx context.Context) func() {
	deadline, _ := ctx.Deadline() // zero: none
	_ = w.conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = w.conn.SetDeadline(time.Unix(1, 0)) })
	return func() {
		stop()
		_ = w.conn.SetDeadline(time.Time{})
	}
}

// fail says what failed, reporting ctx's error when ctx ended the I/O.
func (w *wireConn) fail(ctx context.Context, doing string, req kmsg.Request, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		err = fmt.Errorf("%w: %w", cause, err)
	}
	return fmt.Errorf("devbroker: %s %s: %w", doing, kmsg.NameForKey(req.Key()), err)
}
