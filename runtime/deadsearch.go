package runtime

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

// DeadFilter selects dead letters for [Runtime.FindDeadLetters]. Its
// zero value selects every dead letter, oldest first; each field set
// narrows the selection (the conditions are and-ed).
type DeadFilter struct {
	// Class, when not "", keeps the dead letters of that class only
	// (exact match on Message.Class).
	Class string
	// Topic, when not "", keeps those read from that topic (exact match
	// on Message.Origin.Topic; a message not read from Kafka has "").
	Topic string
	// Partition, when not nil, keeps those read from that partition
	// (Message.Origin.Partition; with Topic "", of any topic).
	Partition *int
	// Key, when not nil, keeps those whose Message.Key has exactly these
	// bytes. An empty non-nil Key matches a nil and an empty key alike.
	Key []byte
	// ErrorContains, when not "", keeps those whose last error's text
	// (DeadLetter.Err) contains it (case-sensitive substring).
	ErrorContains string
	// MinAttempts, when above zero, keeps those with at least that many
	// failed attempts (Message.Attempt; an orphan of an unknown class
	// may have 0).
	MinAttempts int
	// Since and Until bound the last failure (DeadLetter.LastFailed,
	// the record's SavedAt: when it last failed and was written):
	// a zero Since or Until is no bound; otherwise kept are those with
	// Since <= LastFailed < Until (half-open, so adjacent windows do
	// not overlap).
	Since, Until time.Time
	// FirstSince and FirstUntil bound the first failure
	// (DeadLetter.FirstFailed) the same way. A dead letter whose
	// FirstFailed is zero (it never failed in a handler: an orphan of
	// an unknown class) matches neither bound when one is set.
	FirstSince, FirstUntil time.Time
	// Newest lists the most recently dead-lettered first. The order is
	// the order the dead letters were saved in this state file (a
	// requeued dead letter that fails again keeps its place); Newest
	// reverses it.
	Newest bool
}

// Match reports whether dl is selected by the filter (Newest aside).
func (f *DeadFilter) Match(dl *DeadLetter) bool {
	return f.match(&dl.Message, dl.Err, dl.FirstFailed, dl.LastFailed)
}

func (f *DeadFilter) matchRecord(rec *snapshot.Record) bool {
	return f.match(&rec.Message, rec.Err, rec.FirstFailed, rec.SavedAt)
}

func (f *DeadFilter) match(m *handoff.Message, errText string, first, last time.Time) bool {
	switch {
	case f.Class != "" && m.Class != f.Class,
		f.Topic != "" && m.Origin.Topic != f.Topic,
		f.Partition != nil && m.Origin.Partition != *f.Partition,
		f.Key != nil && !bytes.Equal(m.Key, f.Key),
		f.ErrorContains != "" && !strings.Contains(errText, f.ErrorContains),
		f.MinAttempts > 0 && m.Attempt < f.MinAttempts,
		!inWindow(last, f.Since, f.Until),
		!inWindow(first, f.FirstSince, f.FirstUntil):
		return false
	}
	return true
}

// inWindow reports whether since <= t < until, a zero bound being none;
// a zero t is in no window that has a bound.
func inWindow(t, since, until time.Time) bool {
	if since.IsZero() && until.IsZero() {
		return true
	}
	if t.IsZero() {
		return false
	}
	return (since.IsZero() || !t.Before(since)) && (until.IsZero() || t.Before(until))
}

// FindDeadLetters returns up to limit dead letters that filter selects,
// oldest or (filter.Newest) newest first, starting after the cursor
// after (the zero Cursor for the first page); the cursor of the next
// page (zero when there is none); and total, the number of dead letters
// the filter selects in all (every page, not only after the cursor).
// A cursor is of one order: a cursor of an oldest-first page given to a
// newest-first search (or the other way) is refused with an error
// wrapping [ErrBadCursor]. Paging is stable both ways: a dead letter
// saved while an operator pages goes to the newest end (a new first page
// when Newest), so pages neither repeat nor skip a dead letter that
// stays; one deleted meanwhile just leaves its page.
//
// With the changelog it searches those of the partitions this instance
// owns (and of no partition), as [Runtime.DeadLetters] lists. Cost:
// every call reads and decodes every dead letter of filter.Class (of
// every class when "") in this state file, in one read transaction, to
// count total: linear in the number of dead letters, with memory for a
// page only. It needs a running runtime and does not wait for handlers.
// A limit below 1 is an error.
func (r *Runtime) FindDeadLetters(filter DeadFilter, after Cursor, limit int) (page []DeadLetter, next Cursor, total int, err error) {
	return r.fail.find(filter, after, limit)
}

// find is [Runtime.FindDeadLetters].
func (f *failures) find(filter DeadFilter, after Cursor, limit int) ([]DeadLetter, Cursor, int, error) {
	if _, err := listing(f.cfg.state, "dead letters", limit); err != nil {
		return nil, "", 0, err
	}
	from, err := after.deadKeyIn(filter.Newest)
	if err != nil {
		return nil, "", 0, err
	}
	found, next, total, err := f.cfg.state.deadList(snapshot.DeadQuery{Class: filter.Class, From: from, Newest: filter.Newest, Limit: limit,
		Match: func(rec *snapshot.Record) bool {
			return f.cfg.clog.mine(rec) && filter.matchRecord(rec)
		}})
	if err != nil {
		return nil, "", 0, fmt.Errorf("runtime: search dead letters: %w", err)
	}
	out := make([]DeadLetter, 0, len(found))
	for i := range found {
		out = append(out, deadLetterOf(found[i].ID, &found[i].Record))
	}
	if filter.Newest {
		return out, deadNewestCursor(next), total, nil
	}
	return out, deadCursor(next), total, nil
}
