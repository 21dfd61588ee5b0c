package store

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/handoff-go/handoff"
)

const benchRecords = 100_000

// benchRecord is a realistic shutdown record: a Kafka message with a
// 1 KiB value and three headers.
func benchRecord(i int, value []byte) Record {
	now := time.Now()
	return Record{
		Message: handoff.Message{
			ID:    fmt.Sprintf("orders/%d/%d", i%12, 1_000_000+i),
			Class: "orders",
			Key:   fmt.Appendf(nil, "customer-%d", i%5000),
			Value: value,
			Headers: []handoff.Header{
				{Key: "content-type", Value: []byte("application/json")},
				{Key: "trace-id", Value: fmt.Appendf(nil, "%032x", i)},
				{Key: "source", Value: []byte("checkout")},
			},
			Origin:    handoff.Origin{Topic: "orders", Partition: i % 12, Offset: int64(1_000_000 + i)},
			FirstSeen: now,
		},
		Reason:  "unstarted",
		SavedAt: now,
	}
}

// benchRecordSet returns n records, each with its own random 1 KiB value.
func benchRecordSet(n int) []Record {
	rng := rand.New(rand.NewPCG(1, 2))
	values := make([]byte, n*1024)
	for i := range values {
		values[i] = byte(rng.Uint32())
	}
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = benchRecord(i, values[i*1024:(i+1)*1024:(i+1)*1024])
	}
	return recs
}

// BenchmarkSavePending100k is the shutdown snapshot: 100k records of
// 1 KiB in one Update's Tx.SavePending into a fresh file. Opening, closing and
// removing the file are not timed. The Sync variant is the real figure:
// default options, fsync on.
func BenchmarkSavePending100k(b *testing.B) {
	recs := benchRecordSet(benchRecords)
	for _, bc := range []struct {
		name    string
		opts    Options
		capture bool
	}{
		{"Sync", Options{}, false},
		{"NoSync", Options{NoSync: true}, false},
		// A map smaller than the file makes bbolt remap mid-commit.
		{"SyncMmap64MiB", Options{InitialMmapSize: 64 << 20}, false},
		// With the changelog capture on, a Send that returns at once.
		{"Sync/capture", Options{}, true},
		{"NoSync/capture", Options{NoSync: true}, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			dir := b.TempDir()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				b.StopTimer()
				path := filepath.Join(dir, fmt.Sprintf("state-%d.db", i))
				i++
				s, err := Open(path, bc.opts)
				if err != nil {
					b.Fatal(err)
				}
				if bc.capture {
					if err := s.SetChangelog(benchChangelog()); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				if _, err := s.savePending(recs...); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				if err := os.Remove(path); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(benchRecords)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// benchPendingStore returns a store (closed with the benchmark) holding
// benchRecords pending records of 1 KiB values.
func benchPendingStore(b *testing.B) *Store {
	s, err := Open(filepath.Join(b.TempDir(), "state.db"), Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if _, err := s.savePending(benchRecordSet(benchRecords)...); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkLoadPending100k reads a 100k-record snapshot (1 KiB values)
// that is already in the page cache with Tx.LoadPending, in one View.
func BenchmarkLoadPending100k(b *testing.B) {
	s := benchPendingStore(b)
	b.ReportAllocs()
	for b.Loop() {
		var (
			entries []Entry
			bad     []*DecodeError
		)
		err := s.View(func(tx *Tx) (err error) { entries, bad, err = tx.LoadPending(); return err })
		if err != nil || len(bad) > 0 || len(entries) != benchRecords {
			b.Fatal(len(entries), bad, err)
		}
	}
	b.ReportMetric(float64(benchRecords)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkScanPending100k reads the same snapshot as
// BenchmarkLoadPending100k a batch at a time, as the runtime's re-push
// does (the recovery read), without collecting the entries.
func BenchmarkScanPending100k(b *testing.B) {
	s := benchPendingStore(b)
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		bad, err := s.ScanPending(func(batch []Entry) bool {
			n += len(batch)
			return true
		})
		if err != nil || len(bad) > 0 || n != benchRecords {
			b.Fatal(n, bad, err)
		}
	}
	b.ReportMetric(float64(benchRecords)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkEncode(b *testing.B) {
	r := benchRecordSet(1)[0]
	buf := appendRecord(nil, &r)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = appendRecord(buf[:0], &r)
	}
}

func BenchmarkDecode(b *testing.B) {
	r := benchRecordSet(1)[0]
	buf := appendRecord(nil, &r)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeRecord(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSaveDeadConcurrent is dead-lettering under load: each of
// many goroutines saves one record per call, as the runtime does per
// failed message, in [Store.Batch], which shares one transaction and one
// fsync among the calls that arrive while another commits. Fsync is on.
// One iteration is one round: every goroutine saves one record.
func BenchmarkSaveDeadConcurrent(b *testing.B) {
	recs := benchRecordSet(1024)
	for _, bc := range []struct {
		goroutines int
		capture    bool
	}{{16, false}, {256, false}, {16, true}, {256, true}} {
		goroutines := bc.goroutines
		name := fmt.Sprintf("goroutines=%d", goroutines)
		if bc.capture {
			name += "/capture"
		}
		b.Run(name, func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "state.db"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if bc.capture {
				if err := s.SetChangelog(benchChangelog()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				var wg sync.WaitGroup
				for g := range goroutines {
					wg.Go(func() {
						err := s.Batch(func(tx *Tx) error { _, err := tx.SaveDead(recs[g%len(recs)]); return err })
						if err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64(goroutines)*float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkDelayed100k schedules 100k messages of 1 KiB in one
// SaveDelayed, then drains them as the scheduler does: DueDelayed of
// 1000, DeleteDelayed of those, until none is left. Fsync is on.
// save-msgs/s and drain-msgs/s time the two halves; B/waiting-msg is the
// file's growth per scheduled message.
func BenchmarkDelayed100k(b *testing.B) {
	recs := benchRecordSet(benchRecords)
	now := time.Now()
	items := make([]Delayed, len(recs))
	for i := range items {
		// Dues spread over a minute, not in save order.
		items[i] = Delayed{Due: now.Add(-time.Duration((i*7919)%60_000) * time.Millisecond), Record: recs[i]}
	}
	dir := b.TempDir()
	var saveTime, drainTime time.Duration
	var grown int64
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		b.StopTimer()
		path := filepath.Join(dir, fmt.Sprintf("state-%d.db", i))
		i++
		s, err := Open(path, Options{})
		if err != nil {
			b.Fatal(err)
		}
		empty := fileSize(b, path)
		b.StartTimer()

		start := time.Now()
		if _, err := s.saveDelayed(items...); err != nil {
			b.Fatal(err)
		}
		saveTime += time.Since(start)
		grown += fileSize(b, path) - empty

		start = time.Now()
		drained := 0
		for {
			due, _, err := s.dueDelayed(nil, now, 1000)
			if err != nil {
				b.Fatal(err)
			}
			if len(due) == 0 {
				break
			}
			keys := make([]DelayedKey, len(due))
			for j := range due {
				keys[j] = due[j].Key
			}
			if err := s.deleteDelayed(keys...); err != nil {
				b.Fatal(err)
			}
			drained += len(due)
		}
		drainTime += time.Since(start)
		if drained != benchRecords {
			b.Fatalf("drained %d of %d", drained, benchRecords)
		}

		b.StopTimer()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		if err := os.Remove(path); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	n := float64(benchRecords) * float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(n/saveTime.Seconds(), "save-msgs/s")
	b.ReportMetric(n/drainTime.Seconds(), "drain-msgs/s")
	b.ReportMetric(float64(grown)/n, "B/waiting-msg")
}

// benchChangelog routes every record by its origin and sends at once.
func benchChangelog() Changelog {
	return Changelog{
		Route: func(rec *Record) (string, int32, bool) {
			return rec.Message.Origin.Topic, int32(rec.Message.Origin.Partition), true
		},
		Send: func([]Change) func() error { return func() error { return nil } },
	}
}

// BenchmarkApplyChangelog100k restores 100k pending records of 1 KiB,
// the changelog of a shutdown snapshot, into an empty file in one
// transaction: ApplyChangelog and the commit are timed.
func BenchmarkApplyChangelog100k(b *testing.B) {
	src, err := Open(filepath.Join(b.TempDir(), "src.db"), Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	var changes []Change
	cl := benchChangelog()
	cl.Send = func(cs []Change) func() error { changes = append(changes, cs...); return nil }
	if err := src.SetChangelog(cl); err != nil {
		b.Fatal(err)
	}
	if _, err := src.savePending(benchRecordSet(benchRecords)...); err != nil {
		b.Fatal(err)
	}
	src.Close()
	recs := make([]ChangelogRecord, len(changes))
	for i, c := range changes {
		recs[i] = ChangelogRecord{Offset: int64(i), Key: c.Key, Value: c.Value}
	}
	for _, bc := range []struct {
		name string
		opts Options
	}{{"Sync", Options{}}, {"NoSync", Options{NoSync: true}}} {
		b.Run(bc.name, func(b *testing.B) {
			dir := b.TempDir()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				b.StopTimer()
				path := filepath.Join(dir, fmt.Sprintf("state-%d.db", i))
				i++
				s, err := Open(path, bc.opts)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				err = s.Update(func(tx *Tx) error {
					out, err := tx.ApplyChangelog("orders", 0, recs, int64(len(recs)))
					if err == nil && len(out.Pending) != benchRecords {
						err = fmt.Errorf("applied %d", len(out.Pending))
					}
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				if err := os.Remove(path); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(benchRecords)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

func fileSize(b *testing.B, path string) int64 {
	b.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return fi.Size()
}
