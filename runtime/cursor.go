package runtime

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"

	"github.com/handoff-go/handoff/snapshot"
)

// Cursor marks a place in a paged listing ([Runtime.DeadLetters],
// [Runtime.Delayed]): pass the one a page returned to get the page after
// it. The zero Cursor ("") asks for the first page, and a listing returns
// it when there is no next page. A Cursor is opaque text, safe in a URL
// query; it stays valid across restarts on the same state file. A cursor
// of one listing given to another, or text no listing made, is refused
// with an error wrapping [ErrBadCursor].
type Cursor string

// Cursor kinds: the first byte of a cursor's text.
const (
	cursorDead       = 'd'
	cursorDeadNewest = 'n' // of a newest-first dead letter search
	cursorDelayed    = 'w'
)

func makeCursor(kind byte, raw []byte) Cursor {
	return Cursor(string(kind) + base64.RawURLEncoding.EncodeToString(raw))
}

// raw returns the state-file key a cursor of kind holds, nil for the zero
// cursor.
func (c Cursor) raw(kind byte, what string) ([]byte, error) {
	if c == "" {
		return nil, nil
	}
	if c[0] != kind {
		return nil, fmt.Errorf("%w: %q is not a cursor of %s", ErrBadCursor, string(c), what)
	}
	b, err := base64.RawURLEncoding.DecodeString(string(c[1:]))
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("%w: %q is not a cursor of %s", ErrBadCursor, string(c), what)
	}
	return b, nil
}

// deadCursor is the cursor after dead letter key; zero for key 0 (no next
// page).
func deadCursor(key uint64) Cursor {
	if key == 0 {
		return ""
	}
	return makeCursor(cursorDead, binary.BigEndian.AppendUint64(nil, key))
}

// deadNewestCursor is the cursor before dead letter key in a
// newest-first search; zero for key 0 (no next page).
func deadNewestCursor(key uint64) Cursor {
	if key == 0 {
		return ""
	}
	return makeCursor(cursorDeadNewest, binary.BigEndian.AppendUint64(nil, key))
}

func (c Cursor) deadKey() (uint64, error) { return c.deadKeyIn(false) }

// deadKeyIn returns the dead letter key of a cursor of an oldest-first
// (or, newest, a newest-first) listing; 0 for the zero cursor.
func (c Cursor) deadKeyIn(newest bool) (uint64, error) {
	kind, what := byte(cursorDead), "dead letters"
	if newest {
		kind, what = cursorDeadNewest, "dead letters, newest first"
	}
	b, err := c.raw(kind, what)
	if err != nil || b == nil {
		return 0, err
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: %q is not a cursor of %s", ErrBadCursor, string(c), what)
	}
	return binary.BigEndian.Uint64(b), nil
}

func delayedCursor(key snapshot.DelayedKey) Cursor { return makeCursor(cursorDelayed, key) }

func (c Cursor) delayedKey() (snapshot.DelayedKey, error) {
	b, err := c.raw(cursorDelayed, "delayed messages")
	if err != nil || b == nil {
		return nil, err
	}
	if len(b) < 8 {
		return nil, fmt.Errorf("%w: %q is not a cursor of delayed messages", ErrBadCursor, string(c))
	}
	return snapshot.DelayedKey(b), nil
}

// listing returns the open state file for a paged listing of what, or
// ErrNotRunning, or an error for a limit that is not positive.
func listing(state *stateFile, what string, limit int) (*snapshot.State, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("runtime: %s: limit must be > 0, got %d", what, limit)
	}
	return state.get()
}
