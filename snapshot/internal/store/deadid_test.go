package store

import (
	"encoding/hex"
	"errors"
	"testing"
)

func TestParseDeadID(t *testing.T) {
	for _, s := range []string{"3f2a9c01d4e5b6a7-12", "0000000000000000-1", "12", "18446744073709551615"} {
		id, err := ParseDeadID(s)
		if err != nil {
			t.Fatalf("ParseDeadID(%q): %v", s, err)
		}
		if got := id.String(); got != s {
			t.Errorf("ParseDeadID(%q).String() = %q", s, got)
		}
	}
	if id, err := ParseDeadID("3F2A9C01D4E5B6A7-12"); err != nil || id.String() != "3f2a9c01d4e5b6a7-12" {
		t.Errorf("upper case: %v %v", id, err)
	}
	for _, s := range []string{"", "0", "-12", "3f2a9c01d4e5b6a7-", "3f2a9c01d4e5b6a7-0", "3f2a9c01d4e5b6-12", "3f2a9c01d4e5b6a7x-12",
		"zz2a9c01d4e5b6a7-12", "3f2a9c01d4e5b6a7-+1", "+1", "3f2a9c01d4e5b6a7-1-2", "1 ", "18446744073709551616"} {
		if id, err := ParseDeadID(s); !errors.Is(err, ErrDeadID) {
			t.Errorf("ParseDeadID(%q) = %v, %v; want ErrDeadID", s, id, err)
		}
	}
}

// deadIDs returns the ID of each of keys, and the key FindDead finds for
// each ID.
func deadIDs(t *testing.T, s *Store, keys []uint64) ([]DeadID, []uint64) {
	t.Helper()
	ids := make([]DeadID, len(keys))
	found := make([]uint64, len(keys))
	err := s.View(func(tx *Tx) error {
		for i, k := range keys {
			id, err := tx.DeadID(k)
			if err != nil {
				return err
			}
			ids[i] = id
			got, ok, err := tx.FindDead(id)
			if err != nil {
				return err
			}
			if !ok {
				t.Errorf("FindDead(%s) of key %d: not found", id, k)
			}
			found[i] = got
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids, found
}

// TestDeadIDFollowsTheRecord: a dead letter's ID is its writer's
// changelog key, in the writer's file and in a file that restored it
// under another key; a bare number names a key only in a file without
// a changelog ID.
func TestDeadIDFollowsTheRecord(t *testing.T) {
	// No changelog: IDs are bare keys.
	plain := setup(t)
	keys, err := plain.saveDead(records(2)...)
	if err != nil {
		t.Fatal(err)
	}
	ids, found := deadIDs(t, plain.Store, keys)
	for i, id := range ids {
		if !id.Local || id.Seq != keys[i] || found[i] != keys[i] || id.String() != ParseDeadIDMust(t, id.String()).String() {
			t.Errorf("file without changelog: key %d has ID %+v, found %d", keys[i], id, found[i])
		}
	}

	// The writer: IDs are its file ID and key.
	a, recA, fileA := capStore(t)
	if _, err := a.saveDead(records(3)...); err != nil { // keys 1..3 of A, left in A only
		t.Fatal(err)
	}
	recA.reset()
	keysA, err := a.saveDead(fullRecord(1), fullRecord(2))
	if err != nil {
		t.Fatal(err)
	}
	idsA, foundA := deadIDs(t, a.Store, keysA)
	for i, id := range idsA {
		if id.Local || id.File != [8]byte(fileA[:8]) || id.Seq != keysA[i] || foundA[i] != keysA[i] {
			t.Errorf("writer: key %d has ID %+v, found %d", keysA[i], id, foundA[i])
		}
		if want := hex.EncodeToString(fileA[:8]); id.String()[:16] != want {
			t.Errorf("ID text %s does not start with %s", id, want)
		}
	}
	// A bare key is refused in a file with a changelog ID.
	err = a.View(func(tx *Tx) error { _, _, err := tx.FindDead(DeadID{Seq: keysA[0], Local: true}); return err })
	if !errors.Is(err, ErrDeadID) {
		t.Errorf("bare key in a changelog file: %v, want ErrDeadID", err)
	}

	// The restorer: its own dead letters first, so that its keys differ
	// from the writer's; the restored ones keep the writer's IDs.
	b, _, fileB := capStore(t)
	ownB, err := b.saveDead(records(5)...)
	if err != nil {
		t.Fatal(err)
	}
	applyAll(t, b.Store, changesToRecords(recA.all(), 0), int64(len(recA.all())))
	var restored []uint64
	err = b.View(func(tx *Tx) error {
		es, _, err := tx.DeadPage("", ownB[len(ownB)-1], 0)
		for _, e := range es {
			restored = append(restored, e.Key)
		}
		return err
	})
	if err != nil || len(restored) != 2 {
		t.Fatalf("restored %v, %v", restored, err)
	}
	idsB, foundB := deadIDs(t, b.Store, restored)
	for i := range idsB {
		if idsB[i] != idsA[i] || foundB[i] != restored[i] {
			t.Errorf("restored under key %d: ID %s, writer's %s; found %d", restored[i], idsB[i], idsA[i], foundB[i])
		}
		if restored[i] == keysA[i] {
			t.Errorf("restored under the writer's key %d: the test does not test re-keying", restored[i])
		}
	}
	// B's own dead letters keep B's IDs, distinct from the restored.
	idsOwn, _ := deadIDs(t, b.Store, ownB)
	for i, id := range idsOwn {
		if id.File != [8]byte(fileB[:8]) || id.Seq != ownB[i] {
			t.Errorf("own dead letter %d of the restorer: ID %s", ownB[i], id)
		}
	}
	// An ID of the writer's key that B does not hold, and one of no file.
	err = b.View(func(tx *Tx) error {
		for _, id := range []DeadID{{File: idsA[0].File, Seq: 1}, {File: [8]byte{1, 2, 3}, Seq: restored[0]}} {
			if k, ok, err := tx.FindDead(id); ok || err != nil {
				t.Errorf("FindDead(%s) = %d, %v, %v; want not found", id, k, ok, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func ParseDeadIDMust(t *testing.T, s string) DeadID {
	t.Helper()
	id, err := ParseDeadID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
