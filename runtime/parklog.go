package runtime

import (
	"log/slog"
	"sync"
	"time"
)

// parkLogEvery is how often at most one key of an ordered class logs a
// parking at Info: a key behind a dead letter may park thousands of
// messages, and one line per message would bury the rest of the log.
const parkLogEvery = 10 * time.Second

// parkLines rate-limits the Info lines of the messages an ordered class
// parks: one line per key at most every parkLogEvery, each saying how
// many of the key's parkings were not logged since the one before (those
// are logged at Debug). A key whose quiet period ended with parkings not
// logged gets a line of its own with their count at the next parking of
// its class, and is forgotten then; so the map holds only keys that
// parked within the last parkLogEvery or two. The zero value is ready to
// use; it is safe for concurrent use. Message keys are not logged: the
// lines name the parked message's ID and its blocker's.
type parkLines struct {
	mu    sync.Mutex
	keys  map[string]*parkLine
	swept time.Time // when the last sweep ran
}

type parkLine struct {
	next       time.Time // the earliest the key's next Info line may go
	suppressed int       // parkings not logged at Info since the last line
	blocker    string    // the blocker of the last parking
}

// parked logs that message id of class was parked behind blocker under
// key: at Info when the key's last Info line is parkLogEvery old (or it
// has none), with "suppressed" counting the parkings since; at Debug
// otherwise.
func (p *parkLines) parked(log *slog.Logger, class string, key []byte, id, blocker string) {
	now := time.Now()
	p.mu.Lock()
	if p.keys == nil {
		p.keys = map[string]*parkLine{}
	}
	l := p.keys[string(key)]
	if l != nil && now.Before(l.next) {
		l.suppressed++
		l.blocker = blocker
		p.mu.Unlock()
		log.Debug("message parked behind its key's blocker", "class", class, "id", id, "blocker", blocker)
		return
	}
	suppressed := 0
	if l == nil {
		l = &parkLine{}
		p.keys[string(key)] = l
	} else {
		suppressed = l.suppressed
	}
	*l = parkLine{next: now.Add(parkLogEvery), blocker: blocker}
	quiet := p.sweepLocked(now)
	p.mu.Unlock()
	log.Info("message parked behind its key's blocker", "class", class, "id", id, "blocker", blocker,
		"suppressed", suppressed)
	for _, q := range quiet {
		log.Info("messages parked behind their key's blocker, not logged one by one", "class", class,
			"blocker", q.blocker, "suppressed", q.suppressed)
	}
}

// sweepLocked forgets the keys whose quiet period has ended, at most once
// every parkLogEvery, and returns those that had parkings not logged.
func (p *parkLines) sweepLocked(now time.Time) []parkLine {
	if now.Sub(p.swept) < parkLogEvery {
		return nil
	}
	p.swept = now
	var quiet []parkLine
	for k, l := range p.keys {
		if now.Before(l.next) {
			continue
		}
		if l.suppressed > 0 {
			quiet = append(quiet, *l)
		}
		delete(p.keys, k)
	}
	return quiet
}
