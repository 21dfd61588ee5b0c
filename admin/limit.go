package admin

import (
	"container/list"
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
	// failClients bounds the clients tracked at once; past it, the client
	// whose window began first is forgotten for the new one, so clients
	// are limited however many there are (an attacker that spreads its
	// guesses over more than failClients addresses gets failLimit a
	// window from each: bind the admin API to a trusted interface).
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

// failLimiter counts failed token attempts per client in fixed windows,
// for at most failClients clients. It is safe for concurrent use; the
// zero value is ready.
type failLimiter struct {
	mu      sync.Mutex
	clients map[string]*list.Element // of *failCount, in order
	// order holds the clients' counts by the start of their windows, the
	// oldest first.
	order list.List
}

type failCount struct {
	client string
	since  time.Time // the window's first failure
	n      int
}

// limited reports whether client is over its limit at now, and for how
// much longer.
func (l *failLimiter) limited(client string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.clients[client]
	if e == nil || e.Value.(*failCount).n < failLimit {
		return 0, false
	}
	if left := e.Value.(*failCount).since.Add(failWindow).Sub(now); left > 0 {
		return left, true
	}
	l.forget(e)
	return 0, false
}

// failed counts a failure of client at now and returns the count in the
// window and whether this failure reached the limit.
func (l *failLimiter) failed(client string, now time.Time) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.clients[client]
	if e != nil && now.Sub(e.Value.(*failCount).since) >= failWindow {
		l.forget(e)
		e = nil
	}
	if e == nil {
		if l.clients == nil {
			l.clients = map[string]*list.Element{}
		}
		for len(l.clients) >= failClients {
			l.forget(l.order.Front())
		}
		e = l.order.PushBack(&failCount{client: client, since: now})
		l.clients[client] = e
	}
	c := e.Value.(*failCount)
	c.n++
	return c.n, c.n == failLimit
}

// succeeded forgets client's failures.
func (l *failLimiter) succeeded(client string) {
	l.mu.Lock()
	if e := l.clients[client]; e != nil {
		l.forget(e)
	}
	l.mu.Unlock()
}

// forget drops e's client; l.mu is held.
func (l *failLimiter) forget(e *list.Element) {
	delete(l.clients, e.Value.(*failCount).client)
	l.order.Remove(e)
}

// tracked returns how many clients l tracks.
func (l *failLimiter) tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}
