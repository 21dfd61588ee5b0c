package store_test

import (
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot/internal/store"
)

// Example shows a shutdown snapshot, one Update, and the re-push on the
// next start.
func Example() {
	dir, err := os.MkdirTemp("", "snapshot-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "state.db")

	// Shutdown: save what was not processed, in one transaction.
	s, err := store.Open(path, store.Options{})
	if err != nil {
		log.Fatal(err)
	}
	now := time.Now()
	var recs []store.Record
	for i, id := range []string{"orders/0/41", "orders/0/42"} {
		recs = append(recs, store.Record{
			Message: handoff.Message{
				ID:     id,
				Class:  "orders",
				Value:  []byte("paid"),
				Origin: handoff.Origin{Topic: "orders", Partition: 0, Offset: int64(41 + i)},
			},
			Reason:  "unstarted",
			SavedAt: now,
		})
	}
	var keys []uint64
	err = s.Update(func(tx *store.Tx) error {
		var err error
		keys, err = tx.SavePending(recs...)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("saved", keys)
	if err := s.Close(); err != nil {
		log.Fatal(err)
	}

	// Next start: re-push in save order, delete each once it is done.
	// Deletes from many handlers share fsyncs in Batch.
	s, err = store.Open(path, store.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	bad, err := s.ScanPending(func(batch []store.Entry) bool {
		for _, e := range batch {
			fmt.Println("re-push", e.Key, e.Record.Message.ID, e.Record.Reason)
			if err := s.Batch(func(tx *store.Tx) error { return tx.DeletePending(e.Key) }); err != nil {
				log.Fatal(err)
			}
		}
		return true
	})
	if err != nil {
		log.Fatal(err)
	}
	var counts map[string]int
	err = s.View(func(tx *store.Tx) error {
		var err error
		counts, err = tx.Counts()
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("undecodable", len(bad), "left", counts[store.BucketPending])
	// Output:
	// saved [1 2]
	// re-push 1 orders/0/41 unstarted
	// re-push 2 orders/0/42 unstarted
	// undecodable 0 left 0
}

// ExampleStore_Update moves a re-pushed message that failed for good from
// the pending bucket to the dead letters in one transaction: a crash
// leaves it in one place or the other, never in both or neither.
func ExampleStore_Update() {
	dir, err := os.MkdirTemp("", "snapshot-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := store.Open(filepath.Join(dir, "state.db"), store.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	msg := handoff.Message{ID: "orders/0/7", Class: "orders", Value: []byte("paid")}
	var keys []uint64
	err = s.Update(func(tx *store.Tx) error {
		var err error
		keys, err = tx.SavePending(store.Record{Message: msg, Reason: "unstarted"})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	now := time.Now()
	dead := store.Record{Message: msg, Reason: "failed", Err: "card declined", FirstFailed: now, SavedAt: now}
	err = s.Update(func(tx *store.Tx) error {
		if _, err := tx.SaveDead(dead); err != nil {
			return err
		}
		return tx.DeletePending(keys[0])
	})
	if err != nil {
		log.Fatal(err)
	}
	err = s.View(func(tx *store.Tx) error {
		counts, err := tx.Counts()
		if err != nil {
			return err
		}
		fmt.Println("pending", counts[store.BucketPending], "dead", counts[store.BucketDead])
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// pending 0 dead 1
}

// ExampleStore_SetChangelog shows the changelog's two halves: one file
// hands every write to a changelog (here a slice standing in for a
// compacted Kafka topic), and a second, empty file, the next owner of the
// partition, applies it and holds the same records.
func ExampleStore_SetChangelog() {
	dir, err := os.MkdirTemp("", "snapshot-changelog-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// The old owner: every record of topic orders belongs to its origin
	// partition; Send keeps the changes in order and acknowledges at once.
	var topic []store.ChangelogRecord
	a, err := store.Open(filepath.Join(dir, "a.db"), store.Options{})
	if err != nil {
		log.Fatal(err)
	}
	err = a.SetChangelog(store.Changelog{
		Route: func(rec *store.Record) (string, int32, bool) {
			return rec.Message.Origin.Topic, int32(rec.Message.Origin.Partition), rec.Message.Origin.Topic != ""
		},
		Send: func(changes []store.Change) func() error {
			for _, c := range changes {
				topic = append(topic, store.ChangelogRecord{Offset: int64(len(topic)), Key: c.Key, Value: c.Value})
			}
			return func() error { return nil } // the broker's acknowledgement
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	var keys []uint64
	err = a.Update(func(tx *store.Tx) (err error) {
		keys, err = tx.SaveDead(
			store.Record{Message: handoff.Message{ID: "orders/0/7", Class: "orders", Origin: handoff.Origin{Topic: "orders", Offset: 7}}, Reason: "failed"},
			store.Record{Message: handoff.Message{ID: "orders/0/9", Class: "orders", Origin: handoff.Origin{Topic: "orders", Offset: 9}}, Reason: "failed"},
		)
		return err
	})
	if err == nil {
		// A requeue succeeded: the first dead letter is deleted, a
		// tombstone in the changelog.
		err = a.Update(func(tx *store.Tx) error { return tx.DeleteDead(keys[0]) })
	}
	if err := errors.Join(err, a.Close()); err != nil {
		log.Fatal(err)
	}

	// The new owner, on an empty disk, restores partition orders/0.
	b, err := store.Open(filepath.Join(dir, "b.db"), store.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	var applied store.Applied
	err = b.Update(func(tx *store.Tx) (err error) {
		applied, err = tx.ApplyChangelog("orders", 0, topic, int64(len(topic)))
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	var dead []store.Entry
	err = b.View(func(tx *store.Tx) (err error) { dead, _, err = tx.DeadPage("", 0, 10); return err })
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("changelog records %d; restored dead letters %d\n", len(topic), len(applied.Dead))
	for _, e := range dead {
		fmt.Println(e.Record.Message.ID)
	}
	// Output:
	// changelog records 3; restored dead letters 1
	// orders/0/9
}
