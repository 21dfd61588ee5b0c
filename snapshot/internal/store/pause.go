package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Pause is a class paused by an operator: the runtime keeps it in the
// meta bucket, under the key pausePrefix + class, so that a restart comes
// back paused until the class is resumed.
type Pause struct {
	// Reason is what the operator gave.
	Reason string
	// Since is when the pause began.
	Since time.Time
}

// pausePrefix starts the meta keys of pauses. Class names are free text,
// so the key is the prefix and the name's bytes.
const pausePrefix = "pause/"

// pauseVersion is the first byte of a pause's value: a future layout
// takes the next number and decodePause reads both.
const pauseVersion = 1

// encodePause is version, Since as big-endian Unix nanoseconds (zero for
// a zero time), then the reason's bytes.
func encodePause(p Pause) []byte {
	b := make([]byte, 0, 9+len(p.Reason))
	b = append(b, pauseVersion)
	var ns int64
	if !p.Since.IsZero() {
		ns = p.Since.UnixNano()
	}
	b = binary.BigEndian.AppendUint64(b, uint64(ns))
	return append(b, p.Reason...)
}

func decodePause(b []byte) (Pause, error) {
	if len(b) < 9 {
		return Pause{}, fmt.Errorf("pause value of %d bytes, want at least 9", len(b))
	}
	if b[0] != pauseVersion {
		return Pause{}, fmt.Errorf("pause value version %d, want %d", b[0], pauseVersion)
	}
	var p Pause
	if ns := int64(binary.BigEndian.Uint64(b[1:9])); ns != 0 {
		p.Since = time.Unix(0, ns)
	}
	p.Reason = string(b[9:])
	return p, nil
}

// PutPause records that class is paused, replacing a pause it had.
func (tx *Tx) PutPause(class string, p Pause) error {
	if class == "" {
		return tx.errorf(errors.New("empty class name"), "write pause")
	}
	b, err := tx.bucket(bucketMeta)
	if err == nil {
		err = b.Put([]byte(pausePrefix+class), encodePause(p))
	}
	return tx.errorf(err, "write pause of class %q", class)
}

// DeletePause removes class's pause and reports whether it had one.
func (tx *Tx) DeletePause(class string) (bool, error) {
	b, err := tx.bucket(bucketMeta)
	if err != nil {
		return false, tx.errorf(err, "delete pause of class %q", class)
	}
	key := []byte(pausePrefix + class)
	if b.Get(key) == nil {
		return false, nil
	}
	return true, tx.errorf(b.Delete(key), "delete pause of class %q", class)
}

// Pauses returns the paused classes. A value that cannot be decoded is
// an error naming its class: it is small and written by this package
// only, so it is not quarantined.
func (tx *Tx) Pauses() (map[string]Pause, error) {
	c, err := tx.cursor(bucketMeta)
	if err != nil {
		return nil, tx.errorf(err, "read pauses")
	}
	out := map[string]Pause{}
	prefix := []byte(pausePrefix)
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		class := string(k[len(prefix):])
		p, err := decodePause(v)
		if err != nil {
			return nil, tx.errorf(err, "read pause of class %q", class)
		}
		out[class] = p
	}
	return out, nil
}
