package store

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/handoff-go/handoff"
)

// Record format versions: the first byte of every record. This package
// writes recordVersion and reads every version down to
// oldestRecordVersion (see "Record format" in the package documentation
// for what changed and how a version is added).
const (
	// recordV1 has no record timestamp.
	recordV1 = 1
	// recordV2 adds Message.Timestamp after the offset.
	recordV2 = 2

	recordVersion       = recordV2
	oldestRecordVersion = recordV1
)

// Record is what the store keeps for one message: the envelope and why it
// was saved.
type Record struct {
	// Message is the envelope, stored whole.
	Message handoff.Message
	// Reason says why the message was saved: "unstarted", "interrupted",
	// "failed", ...
	Reason string
	// Err is the text of the last error, if any.
	Err string
	// FirstFailed is when the message first failed; zero if it never
	// did. It stays put while the message is retried, delayed or parked.
	FirstFailed time.Time
	// Redeliveries counts the persisted delayed redeliveries the message
	// has had.
	Redeliveries int
	// SavedAt is when the record was written: for a dead letter, when it
	// last failed.
	SavedAt time.Time
}

// appendRecord appends the binary encoding of r (format version 2, see the
// package documentation) to dst and returns the extended slice. It grows
// dst at most once. It never fails: every Record is encodable.
func appendRecord(dst []byte, r *Record) []byte {
	m := &r.Message
	dst = slices.Grow(dst, maxEncodedSize(r))
	dst = append(dst, recordVersion)
	dst = appendString(dst, m.ID)
	dst = appendString(dst, m.Class)
	dst = appendBytes(dst, m.Key)
	dst = appendBytes(dst, m.Value)
	if m.Headers == nil {
		dst = binary.AppendUvarint(dst, 0)
	} else {
		dst = binary.AppendUvarint(dst, uint64(len(m.Headers))+1)
		for i := range m.Headers {
			dst = appendString(dst, m.Headers[i].Key)
			dst = appendBytes(dst, m.Headers[i].Value)
		}
	}
	dst = appendString(dst, m.Origin.Topic)
	dst = binary.AppendVarint(dst, int64(m.Origin.Partition))
	dst = binary.AppendVarint(dst, m.Origin.Offset)
	dst = appendTime(dst, m.Timestamp)
	dst = binary.AppendVarint(dst, int64(m.Attempt))
	dst = appendTime(dst, m.FirstSeen)
	dst = appendString(dst, r.Reason)
	dst = appendString(dst, r.Err)
	dst = appendTime(dst, r.FirstFailed)
	dst = binary.AppendVarint(dst, int64(r.Redeliveries))
	dst = appendTime(dst, r.SavedAt)
	return dst
}

// maxEncodedSize bounds the length of r's encoding: every varint counted
// at its widest.
func maxEncodedSize(r *Record) int {
	const v = binary.MaxVarintLen64
	m := &r.Message
	n := 1 + // version
		v + len(m.ID) +
		v + len(m.Class) +
		v + len(m.Key) +
		v + len(m.Value) +
		v + // header count
		v + len(m.Origin.Topic) +
		3*v + // partition, offset, attempt
		1 + 2*v + // timestamp
		1 + 2*v + // first seen
		v + len(r.Reason) +
		v + len(r.Err) +
		1 + 2*v + // first failed
		v + // redeliveries
		1 + 2*v // saved at
	for i := range m.Headers {
		n += 2*v + len(m.Headers[i].Key) + len(m.Headers[i].Value)
	}
	return n
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// appendBytes writes len(b)+1, or 0 for a nil b, so nil and empty differ.
func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendUvarint(dst, 0)
	}
	dst = binary.AppendUvarint(dst, uint64(len(b))+1)
	return append(dst, b...)
}

// appendTime writes 0 for the zero time, else 1, Unix seconds (varint)
// and nanoseconds (uvarint).
func appendTime(dst []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	dst = binary.AppendVarint(dst, t.Unix())
	return binary.AppendUvarint(dst, uint64(t.Nanosecond()))
}

// DecodeRecord decodes a record value as the store keeps it in its
// buckets and as the changelog carries it (the value of a changelog
// record; see "Record format" in the package documentation). The result
// shares no memory with b. Times come back in UTC without a monotonic
// clock reading; the zero time comes back as time.Time{}.
//
// DecodeRecord never panics: a truncated, corrupted or unknown-version
// b makes it return an error wrapping [ErrCorrupt]. An empty b is
// corrupt too (a changelog tombstone is not a record).
func DecodeRecord(b []byte) (Record, error) { return decodeRecord(b) }

// PeekRecord decodes b as DecodeRecord does, without copying it: the
// byte fields of the result alias b, so the caller must not keep them
// past b's life nor write to b. For a look at a record's fields (where
// it routes) over many values.
func PeekRecord(b []byte) (Record, error) { return decodeOwned(b, nil) }

// decodeRecord decodes one record written by appendRecord. The result
// shares no memory with b, so b may be reused or, for bbolt, die with its
// transaction. Times come back in UTC without a monotonic clock reading
// (compare them with time.Time.Equal); the zero time comes back as
// time.Time{}.
//
// decodeRecord never panics. It returns an error wrapping [ErrCorrupt] when
// b is truncated, has bytes after the last field, starts with an unknown
// format version, or holds a value out of range. It reads every format
// version from oldestRecordVersion on; a version-1 record has no
// timestamp and decodes with a zero Message.Timestamp.
func decodeRecord(b []byte) (Record, error) {
	// One copy for all byte fields: Key, Value and header values are
	// capped sub-slices of it, so nothing aliases b and an append to one
	// field cannot overwrite the next.
	return decodeOwned(slices.Clone(b), nil)
}

// decodeOwned decodes b in place, as decodeRecord decodes a copy: the
// byte fields of the result are capped sub-slices of b, so the caller
// must own b and never write to it again. Strings are copies; those that
// name one of a few values (class, topic, header keys, reason) come from
// in when it is not nil.
func decodeOwned(b []byte, in interner) (Record, error) {
	if len(b) == 0 {
		return Record{}, fmt.Errorf("%w: empty", ErrCorrupt)
	}
	version := b[0]
	if version < oldestRecordVersion || version > recordVersion {
		return Record{}, fmt.Errorf("%w: unknown format version %d", ErrCorrupt, version)
	}
	d := decoder{b: b, off: 1}
	var r Record
	m := &r.Message
	m.ID = d.string("id")
	m.Class = d.stringIn("class", in)
	m.Key = d.bytes("key")
	m.Value = d.bytes("value")
	if n := d.uvarint("header count", ""); n > 0 && d.err == nil {
		n--
		// Each header takes at least two bytes: bound the allocation.
		if n > uint64(len(d.b)-d.off)/2 {
			d.fail("header count %d exceeds what %d bytes can hold", n, len(d.b)-d.off)
		} else {
			m.Headers = make([]handoff.Header, n)
			for i := range m.Headers {
				m.Headers[i].Key = d.stringIn("header key", in)
				m.Headers[i].Value = d.bytes("header value")
			}
		}
	}
	m.Origin.Topic = d.stringIn("topic", in)
	m.Origin.Partition = d.int("partition")
	m.Origin.Offset = d.varint("offset", "")
	if version >= recordV2 {
		m.Timestamp = d.time("timestamp")
	}
	m.Attempt = d.int("attempt")
	m.FirstSeen = d.time("first seen")
	r.Reason = d.stringIn("reason", in)
	r.Err = d.string("error")
	r.FirstFailed = d.time("first failed")
	r.Redeliveries = d.int("redeliveries")
	r.SavedAt = d.time("saved at")
	if d.err == nil && d.off != len(d.b) {
		d.fail("%d trailing bytes", len(d.b)-d.off)
	}
	if d.err != nil {
		return Record{}, fmt.Errorf("%w: %w", ErrCorrupt, d.err)
	}
	return r, nil
}

// decoder reads fields from b. After the first failure every read returns
// a zero value and err keeps the first failure, naming the field and the
// byte offset.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format+" at byte %d", append(args, d.off)...)
	}
}

func (d *decoder) left() uint64 { return uint64(len(d.b) - d.off) }

// uvarint reads an unsigned varint; field and part name it in errors
// (part may be empty). They are kept apart so that no string is built
// unless decoding fails.
func (d *decoder) uvarint(field, part string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.varintFail(n, field, part)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint(field, part string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.varintFail(n, field, part)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varintFail(n int, field, part string) {
	if part != "" {
		field += " " + part
	}
	if n == 0 {
		d.fail("truncated %s", field)
	} else {
		d.fail("%s overflows 64 bits", field)
	}
}

// int reads a varint that must fit the platform's int.
func (d *decoder) int(field string) int {
	v := d.varint(field, "")
	if v < math.MinInt || v > math.MaxInt {
		d.fail("%s %d overflows int", field, v)
		return 0
	}
	return int(v)
}

// span returns the next n bytes, capped, or nil after a failure.
func (d *decoder) span(field string, n uint64) []byte {
	if n > d.left() {
		d.fail("%s length %d exceeds the %d bytes left", field, n, d.left())
		return nil
	}
	end := d.off + int(n)
	s := d.b[d.off:end:end]
	d.off = end
	return s
}

func (d *decoder) string(field string) string { return d.stringIn(field, nil) }

// stringIn reads a string, from in when it is not nil.
func (d *decoder) stringIn(field string, in interner) string {
	n := d.uvarint(field, "length")
	if d.err != nil {
		return ""
	}
	return in.string(d.span(field, n))
}

func (d *decoder) bytes(field string) []byte {
	n := d.uvarint(field, "length")
	if d.err != nil || n == 0 {
		return nil
	}
	return d.span(field, n-1)
}

func (d *decoder) time(field string) time.Time {
	if d.err != nil {
		return time.Time{}
	}
	if d.off >= len(d.b) {
		d.fail("truncated %s", field)
		return time.Time{}
	}
	tag := d.b[d.off]
	switch tag {
	case 0:
		d.off++
		return time.Time{}
	case 1:
		d.off++
	default:
		d.fail("%s has unknown tag %d", field, tag)
		return time.Time{}
	}
	sec := d.varint(field, "seconds")
	nsec := d.uvarint(field, "nanoseconds")
	if d.err != nil {
		return time.Time{}
	}
	if nsec >= uint64(time.Second) {
		d.fail("%s nanoseconds %d out of range", field, nsec)
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

// interner hands out one string per distinct byte sequence, so that the
// records of one load share the strings of fields that name one of a few
// values and allocate each only once. It holds at most maxInterned
// strings of at most maxInternedLen bytes: past that it copies, as
// string(b) does. A nil interner always copies. It is not safe for
// concurrent use.
type interner map[string]string

const (
	maxInterned    = 1024
	maxInternedLen = 128
)

// newInterner returns an empty interner.
func newInterner() interner { return make(interner) }

// string returns b as a string.
func (in interner) string(b []byte) string {
	if in == nil || len(b) > maxInternedLen {
		return string(b)
	}
	if s, ok := in[string(b)]; ok { // the lookup does not allocate
		return s
	}
	s := string(b)
	if len(in) < maxInterned {
		in[s] = s
	}
	return s
}
