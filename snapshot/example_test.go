package snapshot_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

// Example shows a shutdown snapshot and the recovery on the next start.
func Example() {
	dir, err := os.MkdirTemp("", "snapshot-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "state.db")

	// Shutdown: save what was not processed, in one transaction.
	s, err := snapshot.Open(path, snapshot.Options{})
	if err != nil {
		log.Fatal(err)
	}
	now := time.Now()
	var recs []snapshot.Record
	for i, id := range []string{"orders/0/41", "orders/0/42"} {
		recs = append(recs, snapshot.Record{
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
	keys, err := s.SavePending(recs, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("saved", keys)
	if err := s.Close(); err != nil {
		log.Fatal(err)
	}

	// Next start: load in save order, delete each once it is done.
	s, err = snapshot.Open(path, snapshot.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	entries, bad, err := s.LoadPending()
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		fmt.Println("re-push", e.Key, e.Record.Message.ID, e.Record.Reason)
		if err := s.DeletePending(e.Key); err != nil {
			log.Fatal(err)
		}
	}
	n, err := s.CountPending()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("undecodable", len(bad), "left", n)
	// Output:
	// saved [1 2]
	// re-push 1 orders/0/41 unstarted
	// re-push 2 orders/0/42 unstarted
	// undecodable 0 left 0
}
