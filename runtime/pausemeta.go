package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/handoff-go/handoff/runtime/internal/changelog"
	"github.com/handoff-go/handoff/snapshot"
)

// Pauses in the changelog's meta topic. A pause is a class's, not an
// instance's: with the changelog on, Runtime.Pause and Resume write it to
// the state file and to the meta topic (key pause/<class>), and every
// instance follows that topic: at its start (loadPauses) and while it
// runs (followPauses, with the follow of the partitions' changelogs). So a
// class paused through one instance's admin API is paused on all of them
// within about a second, and a resume through another resumes it.
//
// Each record says when it was made; an instance applies a record only
// if it was made after the class's last pause or resume made or applied
// there (last writer wins, by the records' clocks).
//
// A resume is a record too, with its time (not a tombstone), so that the
// newer of a resume in the topic and a pause kept only in a file wins: a
// pause an instance's file keeps, from before a resume made elsewhere
// while it was down, is lifted at its start; one made since (the CLI's
// offline pause, or a pause whose meta write failed) is kept, and
// written to the topic for the others.

// pauseKey is the meta topic's key of class's pause.
func pauseKey(class string) []byte { return []byte("pause/" + class) }

// pauseValue is a pause, or a resume (Resumed set), as the meta topic
// keeps it. At is when the pause was made (Since is when the class's
// pause began: a new reason for a paused class keeps it); a record
// without it (an earlier build's) was made at Since.
type pauseValue struct {
	Reason  string    `json:"reason,omitempty"`
	Since   time.Time `json:"since,omitzero"`
	At      time.Time `json:"at,omitzero"`
	Resumed time.Time `json:"resumed,omitzero"`
}

// metaPause is a record of a class's pause in the meta topic: the pause,
// or (pause nil) a resume; at is when it was made, zero for a tombstone,
// which earlier builds wrote for a resume, its time unknown.
type metaPause struct {
	pause *snapshot.Pause
	at    time.Time
}

// decodePause decodes the meta record k, v: the class it is of, and
// false for a key that is not a pause's.
func decodePause(k, v []byte) (string, metaPause, bool, error) {
	class, ok := strings.CutPrefix(string(k), "pause/")
	if !ok {
		return "", metaPause{}, false, nil
	}
	if v == nil {
		return class, metaPause{}, true, nil
	}
	var p pauseValue
	if err := json.Unmarshal(v, &p); err != nil {
		return class, metaPause{}, true, err
	}
	if !p.Resumed.IsZero() {
		return class, metaPause{at: p.Resumed}, true, nil
	}
	at := p.At
	if at.IsZero() {
		at = p.Since
	}
	return class, metaPause{pause: &snapshot.Pause{Reason: p.Reason, Since: p.Since}, at: at}, true, nil
}

// putPause keeps class's pause in the meta topic, or (p nil) its resume,
// made at at. It blocks until the broker acknowledged it, at most
// ChangelogTimeout.
func (l *stateLog) putPause(ctx context.Context, class string, p *snapshot.Pause, at time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	pv := pauseValue{Resumed: at}
	if p != nil {
		pv = pauseValue{Reason: p.Reason, Since: p.Since, At: at}
	}
	v, err := json.Marshal(pv)
	if err != nil {
		return err
	}
	return l.client.WriteMeta(ctx, pauseKey(class), v)
}

// readPauses reads the meta topic's pause records from offset from, in
// offset order, and returns them with the offset to read from next. An
// undecodable one is logged and skipped.
func (l *stateLog) readPauses(ctx context.Context, from int64) ([]namedPause, int64, error) {
	var out []namedPause
	next, err := l.client.ReadMetaFrom(ctx, from, func(recs []changelog.Rec) error {
		for _, r := range recs {
			class, mp, ok, err := decodePause(r.Key, r.Value)
			if err != nil {
				l.log.Error("undecodable pause in the changelog's meta topic skipped", "topic", l.client.MetaTopic(), "key", string(r.Key), "err", err)
				continue
			}
			if ok {
				out = append(out, namedPause{class, mp})
			}
		}
		return nil
	})
	return out, next, err
}

// namedPause is a pause record of a class.
type namedPause struct {
	class string
	metaPause
}

// pauseTarget returns the configured class a meta record of name is
// for: name's, or the class it was renamed to (Config.ClassRenames)
// unless that one has records of its own (own).
func (l *stateLog) pauseTarget(classes map[string]*class, name string, own func(string) bool) *class {
	if c := classes[name]; c != nil {
		return c
	}
	if to, ok := l.renames[name]; ok && !own(to) {
		return classes[to]
	}
	return nil
}

// loadPauses applies the meta topic's pauses and resumes at the start,
// after the state file's own pauses and before the recovery pushes
// anything (see the comment at the top of this file): a class paused
// through any instance starts paused, on a new disk too; a pause in the
// file older than the class's resume in the topic is lifted; one newer,
// or one the topic does not have, is kept and written to the topic. It
// returns an error when the topic cannot be read.
func (l *stateLog) loadPauses(ctx context.Context, classes map[string]*class) error {
	recs, next, err := l.readPauses(ctx, 0)
	if err != nil {
		return fmt.Errorf("runtime: changelog: read pauses from %s: %w", l.client.MetaTopic(), err)
	}
	l.metaNext.Store(next)
	last := map[string]metaPause{}
	for _, r := range recs {
		last[r.class] = r.metaPause
	}
	store, err := l.state.get()
	if err != nil {
		return err
	}
	seen := map[*class]bool{}
	for name, mp := range last {
		c := l.pauseTarget(classes, name, func(to string) bool { _, ok := last[to]; return ok })
		if c == nil {
			if mp.pause != nil {
				l.log.Warn("changelog's meta topic keeps a pause of a class that is not configured; ignored", "class", name)
			}
			continue
		}
		seen[c] = true
		local, paused := c.hold.Paused()
		switch {
		case mp.pause != nil && !paused:
			c.hold.RestorePause(*mp.pause, false)
			l.pauseMade(c.cfg.Name, mp.at)
		case mp.pause != nil:
			l.pauseMade(c.cfg.Name, latest(mp.at, local.Since))
		case paused && mp.at.After(local.Since):
			if err := c.hold.Resume(store); err != nil {
				return err
			}
			l.pauseMade(c.cfg.Name, mp.at)
			l.log.Warn("class's pause in the state file lifted: the class was resumed through another instance since",
				"class", c.cfg.Name, "paused_since", local.Since, "resumed", mp.at)
		case paused:
			l.pauseMade(c.cfg.Name, local.Since)
			l.publishPause(ctx, c, local)
		default:
			l.pauseMade(c.cfg.Name, mp.at)
		}
	}
	for _, c := range classes {
		if p, paused := c.hold.Paused(); paused && !seen[c] {
			l.pauseMade(c.cfg.Name, p.Since)
			l.publishPause(ctx, c, p)
		}
	}
	return nil
}

// latest returns the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// publishPause writes class c's pause, kept only in this instance's
// file, to the meta topic for the other instances. A failure is logged:
// the class stays paused here.
func (l *stateLog) publishPause(ctx context.Context, c *class, p snapshot.Pause) {
	if err := l.putPause(ctx, c.cfg.Name, &p, p.Since); err != nil {
		l.log.Warn("class's pause, kept in the state file, not written to the changelog's meta topic; it holds on this instance only",
			"class", c.cfg.Name, "err", err)
		return
	}
	l.log.Info("class's pause, kept in the state file, written to the changelog's meta topic for the other instances", "class", c.cfg.Name,
		"since", p.Since, "reason", p.Reason)
}

// pauseMade notes that class's last pause or resume, here or read from
// the meta topic, was made at at: the follow applies only records made
// later (last writer wins, by the time each record says).
func (l *stateLog) pauseMade(class string, at time.Time) {
	l.pauseMu.Lock()
	defer l.pauseMu.Unlock()
	if l.pauseAt == nil {
		l.pauseAt = map[string]time.Time{}
	}
	if at.After(l.pauseAt[class]) {
		l.pauseAt[class] = at
	}
}

// pauseLocal runs act, Runtime.Pause's or Resume's change of class's
// hold, and notes it made now; it returns when, for the meta topic's
// record. The follow does not apply a record of the class meanwhile.
func (l *stateLog) pauseLocal(class string, act func() error) (time.Time, error) {
	l.pauseMu.Lock()
	defer l.pauseMu.Unlock()
	at := time.Now()
	if err := act(); err != nil {
		return at, err
	}
	if l.pauseAt == nil {
		l.pauseAt = map[string]time.Time{}
	}
	l.pauseAt[class] = latest(at, l.pauseAt[class])
	return at, nil
}

// followPauses applies the pauses and resumes written to the meta topic
// since the last look, in order, each only if it was made after the
// class's last pause or resume this instance made or applied (so this
// instance's own records, and records older than its own last action,
// change nothing): a pause pauses the class here (kept in the state file
// too), a resume resumes it. A tombstone, an earlier build's resume, is
// passed over. Only the follow's goroutine calls it, after loadPauses.
func (l *stateLog) followPauses(ctx context.Context, classes map[string]*class) error {
	rctx, cancel := context.WithTimeout(ctx, l.timeout)
	recs, next, err := l.readPauses(rctx, l.metaNext.Load())
	cancel()
	if err != nil {
		if errors.Is(err, changelog.ErrBeyondEnd) {
			l.metaNext.Store(0) // the topic was made again: read it whole
		}
		return err
	}
	if len(recs) > 0 {
		store, err := l.state.get()
		if err != nil {
			return err
		}
		for _, r := range recs {
			c := l.pauseTarget(classes, r.class, func(string) bool { return false })
			if c == nil || r.at.IsZero() {
				continue
			}
			// A failed apply reads the records again at the next look;
			// those applied already are not newer then.
			if err := l.applyPause(store, c, r.metaPause); err != nil {
				return err
			}
		}
	}
	l.metaNext.Store(next)
	return nil
}

// applyPause applies mp to class c if it was made after c's last pause
// or resume here.
func (l *stateLog) applyPause(store *snapshot.Store, c *class, mp metaPause) error {
	l.pauseMu.Lock()
	defer l.pauseMu.Unlock()
	name := c.cfg.Name
	if !mp.at.After(l.pauseAt[name]) {
		return nil
	}
	if l.pauseAt == nil {
		l.pauseAt = map[string]time.Time{}
	}
	l.pauseAt[name] = mp.at
	_, paused := c.hold.Paused()
	switch {
	case mp.pause != nil && !paused:
		return c.hold.PauseFrom(store, *mp.pause)
	case mp.pause == nil && paused:
		if err := c.hold.Resume(store); err != nil {
			return err
		}
		l.log.Warn("class resumed through another instance of the group", "class", name)
	}
	return nil
}
