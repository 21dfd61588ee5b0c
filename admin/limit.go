package admin

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// Failed token attempts are limited per client: after failLimit wrong
// tokens within failWindow of its first, a client's attempts (right or
// wrong) are refused with 429 until that window ends. At 10 a minute,
// guessing even a short token is out of reach, and an operator who
// mistyped waits at most a minute.
const (
	failLimit  = 10
	failWindow = time.Minute
	// failClients bounds the clients tracked at once; past it, expired
	// windows are dropped, then new clients are not tracked (and so not
	// limited) until some expire.
	failClients = 10000
)

// clientOf is the address requests from the same client share: the
// host of the connection's remote address (a proxy in front makes every
// client one; then limit there).
func clientOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// failLimiter counts failed token attempts per client in fixed windows.
// It is safe for concurrent use; the zero value is ready.
type failLimiter struct {
	mu      sync.Mutex
	clients map[string]*failCount
}

type failCount struct {
	since time.Time // the window's first failure
	n     int
}

// limited reports whether client is over its limit at now, and for how
// much longer.
func (l *failLimiter) limited(client string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.clients[client]
	if c == nil || c.n < failLimit {
		return 0, false
	}
	if left := c.since.Add(failWindow).Sub(now); left > 0 {
		return left, true
	}
	delete(l.clients, client)
	return 0, false
}

// failed counts a failure of client at now and returns the count in the
// window and whether this failure reached the limit.
func (l *failLimiter) failed(client string, now time.Time) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.clients[client]
	if c != nil && now.Sub(c.since) >= failWindow {
		c = nil
	}
	if c == nil {
		if l.clients == nil {
			l.clients = map[string]*failCount{}
		}
		if len(l.clients) >= failClients {
			for k, v := range l.clients {
				if now.Sub(v.since) >= failWindow {
					delete(l.clients, k)
				}
			}
			if len(l.clients) >= failClients {
				return 1, false
			}
		}
		c = &failCount{since: now}
		l.clients[client] = c
	}
	c.n++
	return c.n, c.n == failLimit
}

// succeeded forgets client's failures.
func (l *failLimiter) succeeded(client string) {
	l.mu.Lock()
	delete(l.clients, client)
	l.mu.Unlock()
}
