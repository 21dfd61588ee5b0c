package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
)

// Entry is a stored record with its key in its bucket. Keys are sequence
// numbers, so ordering entries by key orders them by save.
type Entry struct {
	Key    uint64
	Record Record
}

// chunkSize is the size of the buffers the Save methods of [Tx] encode
// into. bbolt keeps every value slice passed to Put until the commit, so
// a full chunk is never reused, only replaced.
const chunkSize = 1 << 20

// SavePending writes recs into the pending bucket, under new keys, and
// returns those keys in the order of recs (empty when recs is).
func (tx *Tx) SavePending(recs ...Record) ([]uint64, error) {
	keys, err := tx.putNew(BucketPending, encodeAll(recs), recs)
	if err != nil {
		return nil, tx.errorf(err, "save %d pending records", len(recs))
	}
	return keys, nil
}

// DeletePending deletes the pending records with the given keys. Deleting
// a missing key is not an error.
func (tx *Tx) DeletePending(keys ...uint64) error {
	return tx.errorf(tx.deleteSeq(BucketPending, keys), "delete %d pending records", len(keys))
}

// GetPending returns the pending record with the given key; false when
// there is none. A record that does not decode is reported as a
// [*DecodeError], with true.
func (tx *Tx) GetPending(key uint64) (Record, bool, error) {
	return tx.getRecord(BucketPending, key, "pending record")
}

// PutPending replaces the pending record under key with rec, as
// [Tx.PutDead] does for a dead letter: an error wrapping [ErrNotFound]
// when there is none.
func (tx *Tx) PutPending(key uint64, rec Record) error {
	return tx.replace(BucketPending, seqKey(key), fmt.Sprintf("%016x", key), &rec)
}

// LoadPending returns every pending record in save order. It does not
// delete them: a record stays pending until [Tx.DeletePending] removes
// it, so a crash while the records are re-pushed loses nothing.
//
// A record that cannot be decoded (or a key of the wrong shape) is
// reported in the second result as a [*DecodeError] and loading
// continues. It stays where it is: pass the decode errors to
// [Tx.Quarantine], in a write transaction, so that the next load is
// clean. A key that holds a nested bucket cannot be moved and is
// reported on every load. [Store.ScanPending] reads the same records a
// batch at a time, and moves the bad ones itself.
func (tx *Tx) LoadPending() ([]Entry, []*DecodeError, error) {
	entries, bad, err := tx.readAll(BucketPending)
	if err != nil {
		return nil, nil, tx.errorf(err, "load pending records")
	}
	return entries, bad, nil
}

// scanBatchSize is the most entries [Store.ScanPending] passes at a time.
const scanBatchSize = 256

// ScanPending calls fn with every pending record in save order, in
// batches (of up to 256 records and about 32 KiB of values), and returns
// the records that could not be decoded. It is [Tx.LoadPending] for a
// caller that works through the records a batch at a time and writes to
// the file meanwhile, as the runtime's re-push does: a goroutine of its
// own copies the records out of the file while the calling goroutine
// decodes each batch and calls fn with it. So fn handles the first
// records while the next are still being read, and no slice of all the
// records is ever built: the reader gets at most 256 batches (some
// 8 MiB of values) ahead of fn, so what a scan holds does not grow with
// the file, however long fn blocks. It is a method of Store, not of Tx,
// because fn must not run inside a transaction that reads: a write fn
// makes (the runtime dead-letters records whose class is gone) that grows
// the file's memory map waits for every read transaction to end, so it
// would wait forever. Nor does the reader wait for fn inside its
// read-only transaction: 256 batches ahead, it ends the transaction, and
// once fn has taken half of them it starts the next one after the last
// key it read. The scan reads the records there were when it started
// (up to the bucket's last key then), but for those deleted before the
// reader got to them.
//
// fn runs in the calling goroutine, outside any transaction: it may
// block, and it may use the Store, writes included. The batch slice is
// reused once fn returns, so fn must copy the entries it keeps. The
// entries share no memory with the file. To spare allocations, the byte
// fields of the entries of a batch are capped sub-slices of one block, so
// an append to one never writes over another, but one kept Value keeps
// its whole block alive; equal strings of few values (class, topic,
// header keys, reason) share their memory. When fn returns false,
// ScanPending stops.
//
// Undecodable records are reported in key order and moved to the
// quarantine bucket, as [Tx.Quarantine] moves them, in a write
// transaction of their own after fn's last call: after a stop, only
// those in the batches read before it. When moving them fails,
// ScanPending returns them together with the error. Like LoadPending, it
// deletes no record that decodes.
func (s *Store) ScanPending(fn func(batch []Entry) bool) ([]*DecodeError, error) {
	feed := newRawFeed()
	go s.readRaw(BucketPending, feed)
	bad, err := decodeFeed(BucketPending, feed, fn)
	if err != nil {
		return nil, fmt.Errorf("snapshot: load pending records from %s: %w", s.path, err)
	}
	if len(bad) > 0 {
		if err := s.Update(func(tx *Tx) error { return tx.Quarantine(bad...) }); err != nil {
			return bad, err
		}
	}
	return bad, nil
}

// encodeAll encodes recs into a few large buffers and returns one capped
// sub-slice per record (see encodeEach).
func encodeAll(recs []Record) [][]byte {
	return encodeEach(len(recs), func(i int) *Record { return &recs[i] })
}

// encodeEach encodes the n records at(0) ... at(n-1) into buffers of
// chunkSize, or less for a few small records (a buffer is sized for the
// records left as if they were all the size of the next), and returns
// one capped sub-slice per record. Nothing is ever written over, as
// bbolt's Put requires.
func encodeEach(n int, at func(i int) *Record) [][]byte {
	vals := make([][]byte, n)
	var chunk []byte
	for i := range n {
		r := at(i)
		if need := maxEncodedSize(r); cap(chunk)-len(chunk) < need {
			chunk = make([]byte, 0, max(need, min(chunkSize, need*(n-i))))
		}
		start := len(chunk)
		chunk = appendRecord(chunk, r)
		vals[i] = chunk[start:len(chunk):len(chunk)]
	}
	return vals
}

// readAll decodes every record of the named bucket in key order.
// Records that fail to decode are returned as DecodeErrors.
func (tx *Tx) readAll(name string) ([]Entry, []*DecodeError, error) {
	b, err := tx.bucket(name)
	if err != nil {
		return nil, nil, err
	}
	var (
		entries []Entry
		bad     []*DecodeError
	)
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		e, err := decodeEntry(name, k, v)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		entries = append(entries, e)
	}
	return entries, bad, nil
}

// decodeEntry decodes the record v stored under the 8-byte key k of
// bucket name.
func decodeEntry(name string, k, v []byte) (Entry, *DecodeError) {
	if de := checkShape(name, k, v); de != nil {
		return Entry{}, de
	}
	r, err := decodeRecord(v)
	if err != nil {
		return Entry{}, &DecodeError{Bucket: name, Key: slices.Clone(k), Err: err}
	}
	return Entry{Key: binary.BigEndian.Uint64(k), Record: r}, nil
}

// checkShape reports a key k and value v of bucket name that cannot hold
// a record: a nested bucket, or a key that is not 8 bytes.
func checkShape(name string, k, v []byte) *DecodeError {
	var err error
	switch {
	case v == nil:
		err = fmt.Errorf("%w: nested bucket where a record belongs", ErrCorrupt)
	case len(k) != 8:
		err = fmt.Errorf("%w: key is %d bytes, want 8", ErrCorrupt, len(k))
	default:
		return nil
	}
	return &DecodeError{Bucket: name, Key: slices.Clone(k), Err: err}
}

// rawRecord is a record copied out of the file, not yet decoded.
type rawRecord struct {
	key uint64
	val []byte       // a copy (in readRaw, the file's until ownValues)
	bad *DecodeError // instead of val, for a key or value of the wrong shape
}

// blockSize bounds the values of one batch of raw records, which are
// copied out of the file into one block of memory.
const blockSize = 32 << 10

// ownValues replaces the values of recs, which point into the file, by
// copies: capped sub-slices of one block, so that an append to one cannot
// write over the next. One allocation serves many records (some 28 of
// 1 KiB), and bytes.Join does not zero it before it copies; the block is
// freed once nothing refers to any of its values.
func ownValues(recs []rawRecord) {
	vals := make([][]byte, 0, len(recs))
	for _, r := range recs {
		vals = append(vals, r.val)
	}
	block := bytes.Join(vals, nil)
	for i := range recs {
		n := len(recs[i].val)
		recs[i].val, block = block[:n:n], block[n:]
	}
}

// decode decodes r in place into an entry of bucket name, taking strings
// of few values from in.
func (r rawRecord) decode(name string, in interner) (Entry, *DecodeError) {
	if r.bad != nil {
		return Entry{}, r.bad
	}
	rec, err := decodeOwned(r.val, in)
	if err != nil {
		return Entry{}, &DecodeError{Bucket: name, Key: seqKey(r.key), Err: err}
	}
	return Entry{Key: r.key, Record: rec}, nil
}

// readRaw copies the records of bucket name out of the file into feed, in
// key order and in batches, until the end or until feed is stopped; then
// it finishes feed with the error of the last transaction. A batch holds
// up to scanBatchSize records and, but for its last record, less than
// blockSize bytes of values. It reads the records there are when it
// starts, up to the bucket's last key then, in read-only transactions
// that never wait for the decoder: when feed is full, the transaction
// ends, and the next one starts after the last key read once there is
// room.
func (s *Store) readRaw(name string, feed *rawFeed) {
	var last, after []byte // the bucket's last key at the start; the last key read
	for {
		more := false
		err := s.view(func(tx *Tx) error {
			c, err := tx.cursor(name)
			if err != nil {
				return err
			}
			if last == nil {
				k, _ := c.Last()
				if k == nil {
					return nil
				}
				last = bytes.Clone(k)
			}
			var (
				batch []rawRecord
				size  int
			)
			k, v := c.seekAfter(after)
			for ; k != nil && bytes.Compare(k, last) <= 0; k, v = c.Next() {
				r := rawRecord{bad: checkShape(name, k, v)}
				if r.bad == nil {
					r.key, r.val = binary.BigEndian.Uint64(k), v // copied by ownValues
					size += len(v)
				}
				batch = append(batch, r)
				if len(batch) == scanBatchSize || size >= blockSize {
					ownValues(batch)
					if !feed.put(batch) {
						after, more = append(after[:0], k...), true
						return nil
					}
					batch, size = make([]rawRecord, 0, cap(batch)), 0
				}
			}
			if len(batch) > 0 {
				ownValues(batch)
				feed.put(batch)
			}
			return nil
		})
		if err != nil || !more || !feed.waitRoom() {
			feed.finish(err)
			return
		}
	}
}

// decodeFeed decodes the batches of feed into entries of bucket name and
// calls fn with each, until the feed ends or fn returns false. It returns
// the records that failed to decode, in key order, or the reader's error.
// Either way the reader has finished when it returns.
func decodeFeed(name string, feed *rawFeed, fn func(batch []Entry) bool) ([]*DecodeError, error) {
	var (
		bad   []*DecodeError
		batch []Entry
		in    = newInterner()
	)
	for {
		raws, ok := feed.next()
		if !ok {
			return bad, feed.err
		}
		batch = batch[:0]
		for _, r := range raws {
			e, de := r.decode(name, in)
			if de != nil {
				bad = append(bad, de)
				continue
			}
			batch = append(batch, e)
		}
		if len(batch) > 0 && !fn(batch) {
			feed.stop()
			return bad, nil
		}
	}
}

// feedBatches is how many batches a rawFeed holds: with blockSize, it
// bounds how far the reader gets ahead of the decoder's caller (some
// 8 MiB of values). Once the caller has taken half of them, the reader
// fills the feed again. Fewer slow the runtime's re-push down: on two
// cores 16 batches cost BenchmarkRepush some 35%, 256 are within its
// noise (5%), most likely because the reader, woken for room, waits for
// a processor while the pool's workers run, and the caller runs dry
// meanwhile. A scan alone (BenchmarkScanPending100k) is some 13% slower
// than with an unbounded feed: its heap stays small, so the GC runs
// about four times as often.
const feedBatches = 256

// rawFeed passes batches of raw records from the goroutine that reads
// them, inside read transactions, to the one that decodes them. put
// never blocks: the reader must not keep a transaction open while it
// waits for the decoder's caller, which may be writing to the file, and a
// write that grows the file's memory map waits for every read
// transaction to end. When the feed is full, put tells the reader to end
// its transaction and wait for room (waitRoom) before it opens the next.
type rawFeed struct {
	mu      sync.Mutex
	queue   [][]rawRecord
	stopped bool // the decoder wants no more batches
	done    bool // the reader has finished: its transaction is over
	err     error

	// ready holds a token when the queue or done changed since the
	// decoder last looked; room one when the decoder stopped, or took a
	// batch leaving half the feed or less, since the reader last looked.
	ready, room chan struct{}
}

func newRawFeed() *rawFeed {
	return &rawFeed{ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

// put queues batch, unless the decoder has stopped. It reports whether
// the reader may read on in its transaction: false when the decoder has
// stopped or the feed is full.
func (f *rawFeed) put(batch []rawRecord) bool {
	f.mu.Lock()
	if !f.stopped {
		f.queue = append(f.queue, batch)
	}
	ok := !f.stopped && len(f.queue) < feedBatches
	f.mu.Unlock()
	signal(f.ready)
	return ok
}

// waitRoom waits, outside any transaction, until the decoder has taken
// half of the batches queued or stopped. It reports false when the
// decoder stopped: then the reader should stop too.
func (f *rawFeed) waitRoom() bool {
	for {
		f.mu.Lock()
		stopped, room := f.stopped, len(f.queue) <= feedBatches/2
		f.mu.Unlock()
		if stopped || room {
			return !stopped
		}
		<-f.room
	}
}

// finish records the end of the reader, with its error.
func (f *rawFeed) finish(err error) {
	f.mu.Lock()
	f.done, f.err = true, err
	f.mu.Unlock()
	signal(f.ready)
}

// signal leaves a token in ch, a channel of capacity 1, unless one is
// already waiting there.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// next returns the oldest queued batch, waiting for one while the reader
// runs. It returns false once the reader has finished and every batch has
// been taken; then f.err may be read.
func (f *rawFeed) next() ([]rawRecord, bool) {
	for {
		f.mu.Lock()
		if len(f.queue) > 0 {
			batch := f.queue[0]
			f.queue[0] = nil
			f.queue = f.queue[1:]
			room := len(f.queue) <= feedBatches/2
			f.mu.Unlock()
			if room {
				signal(f.room)
			}
			return batch, true
		}
		done := f.done
		f.mu.Unlock()
		if done {
			return nil, false
		}
		<-f.ready
	}
}

// stop tells the reader to stop, drops the batches it queued and waits
// for it to finish.
func (f *rawFeed) stop() {
	f.mu.Lock()
	f.stopped = true
	f.queue = nil
	f.mu.Unlock()
	signal(f.room)
	for {
		if _, ok := f.next(); !ok {
			return
		}
	}
}
