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
// While running, the topic's order is the truth: the follow applies the
// records in offset order, except a class's records at or before this
// instance's own last write for the class (its own, and those it
// superseded). Pause and Resume hold the class's pause lock across the
// change here and the write, so the follow never applies an older record
// over a change whose write is on its way.
//
// A resume is a record too, with its time (not a tombstone), so that at
// a start the newer of a resume in the topic and a pause kept only in
// the file wins, by their clocks (the file's pause has no offset): a
// pause an instance's file keeps, from before a resume made elsewhere
// while it was down, is lifted; one made since (the CLI's offline pause,
// or a pause whose meta write failed) is kept, and written to the topic
// for the others.

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
// made at at, and returns the record's offset. It blocks until the
// broker acknowledged it, at most ChangelogTimeout.
func (l *stateLog) putPause(ctx context.Context, class string, p *snapshot.Pause, at time.Time) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	pv := pauseValue{Resumed: at}
	if p != nil {
		pv = pauseValue{Reason: p.Reason, Since: p.Since, At: at}
	}
	v, err := json.Marshal(pv)
	if err != nil {
		return 0, err
	}
	return l.client.WriteMeta(ctx, pauseKey(class), v)
}

// readPauses reads the meta topic's pause records from offset from, in
// offset order, and returns them with the offset to read from next. An
// undecodable one is logged and skipped. The dead-letter operations'
// records go to l.ops as they are read (deadops.go).
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
				out = append(out, namedPause{class, r.Offset, mp})
			} else if l.ops != nil {
				l.ops.fromMeta(r.Key, r.Value)
			}
		}
		return nil
	})
	return out, next, err
}

// namedPause is a pause record of a class, at offset in the meta topic.
type namedPause struct {
	class  string
	offset int64
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
		case mp.pause == nil && paused && mp.at.After(local.Since):
			if err := c.hold.Resume(store); err != nil {
				return err
			}
			l.log.Warn("class's pause in the state file lifted: the class was resumed through another instance since",
				"class", c.cfg.Name, "paused_since", local.Since, "resumed", mp.at)
		case mp.pause == nil && paused:
			l.publishPause(ctx, c, local)
		}
	}
	for _, c := range classes {
		if p, paused := c.hold.Paused(); paused && !seen[c] {
			l.publishPause(ctx, c, p)
		}
	}
	return nil
}

// publishPause writes class c's pause, kept only in this instance's
// file, to the meta topic for the other instances. A failure is logged:
// the class stays paused here.
func (l *stateLog) publishPause(ctx context.Context, c *class, p snapshot.Pause) {
	_, err := l.pauseLocal(c.cfg.Name, func() error { return nil }, func(at time.Time) (int64, error) {
		return l.putPause(ctx, c.cfg.Name, &p, p.Since)
	})
	if err != nil {
		l.state.writeFails[toChangelog].Add(1)
		l.log.Warn("class's pause, kept in the state file, not written to the changelog's meta topic; it holds on this instance only",
			"class", c.cfg.Name, "err", err)
		return
	}
	l.log.Info("class's pause, kept in the state file, written to the changelog's meta topic for the other instances", "class", c.cfg.Name,
		"since", p.Since, "reason", p.Reason)
}

// pauseLocal runs act, a change of class's hold here (Runtime.Pause's or
// Resume's), then write, its record in the meta topic, made at the time
// it passes, under the class's pause lock, and notes the record's offset
// as this instance's last write for the class: the follow applies none
// of the class's records at or before it, and none meanwhile. It returns
// act's error, or write's wrapped in errMetaWrite (the change here stays).
func (l *stateLog) pauseLocal(class string, act func() error, write func(at time.Time) (int64, error)) (time.Time, error) {
	l.pauseMu.Lock()
	defer l.pauseMu.Unlock()
	at := time.Now()
	if err := act(); err != nil {
		return at, err
	}
	off, err := write(at)
	if err != nil {
		return at, fmt.Errorf("%w: %w", errMetaWrite, err)
	}
	if l.pauseOff == nil {
		l.pauseOff = map[string]int64{}
	}
	l.pauseOff[class] = max(off, l.pauseOff[class])
	return at, nil
}

// errMetaWrite marks a pause or resume made here whose meta topic write
// failed.
var errMetaWrite = errors.New("not written to the changelog's meta topic")

// followPauses applies the pauses and resumes written to the meta topic
// since the last look, in offset order, but none of a class at or before
// this instance's own last write for it: a pause pauses the class here
// (kept in the state file too), a resume resumes it. A tombstone, an
// earlier build's resume, is passed over. Only the follow's goroutine
// calls it, after loadPauses.
func (l *stateLog) followPauses(ctx context.Context, classes map[string]*class) error {
	rctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	from := l.metaNext.Load()
	if end, err := l.client.MetaEnd(rctx); err != nil || end == from {
		return err // nothing new (one request), or the read below would fail too
	}
	recs, next, err := l.readPauses(rctx, from)
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
			// A failed apply reads the records again at the next look.
			if err := l.applyPause(store, c, r); err != nil {
				return err
			}
		}
	}
	l.metaNext.Store(next)
	return nil
}

// applyPause applies r to class c unless it is at or before this
// instance's own last write for c.
func (l *stateLog) applyPause(store *snapshot.State, c *class, r namedPause) error {
	l.pauseMu.Lock()
	defer l.pauseMu.Unlock()
	if own, ok := l.pauseOff[c.cfg.Name]; ok && r.offset <= own {
		return nil
	}
	_, paused := c.hold.Paused()
	switch {
	case r.pause != nil && !paused:
		return c.hold.PauseFrom(store, *r.pause)
	case r.pause == nil && paused:
		if err := c.hold.Resume(store); err != nil {
			return err
		}
		l.log.Warn("class resumed through another instance of the group", "class", c.cfg.Name)
	}
	return nil
}
