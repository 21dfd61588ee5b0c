package store

import (
	"errors"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestDeadSearch: over more dead letters than one chunk, a search pages
// its matches oldest and newest first without a gap or a repeat, counts
// them all on every page, and leaves out (and reports) an undecodable
// record while returning the rest.
func TestDeadSearch(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	const n = 1100 // over two chunks
	var keys []uint64
	if err := ts.Update(func(tx *Tx) (err error) { keys, err = tx.SaveDead(records(n)...); return err }); err != nil {
		t.Fatal(err)
	}
	match := func(r *Record) bool { return r.Message.Attempt%2 == 0 } // odd i: Attempt is 7+i
	var want []uint64
	for i, k := range keys {
		if i%2 == 1 {
			want = append(want, k)
		}
	}
	for _, newest := range []bool{false, true} {
		w := slices.Clone(want)
		if newest {
			slices.Reverse(w)
		}
		for _, limit := range []int{97, 550, 1000} {
			var got []uint64
			from := uint64(0)
			for pages := 0; ; pages++ {
				var (
					page  []Entry
					next  uint64
					total int
				)
				err := ts.View(func(tx *Tx) (err error) {
					page, next, total, err = tx.DeadSearch("orders", match, from, newest, limit)
					return err
				})
				if err != nil || total != len(want) || len(page) > limit {
					t.Fatalf("newest %v limit %d: page %d, total %d, %v", newest, limit, len(page), total, err)
				}
				got = append(got, entryKeys(page)...)
				if next == 0 {
					break
				}
				if pages > n {
					t.Fatal("paging does not end")
				}
				from = next
			}
			if !slices.Equal(got, w) {
				t.Errorf("newest %v limit %d: %d keys, want %d (first %v, want %v)", newest, limit, len(got), len(w), got[:min(3, len(got))], w[:3])
			}
		}
	}
	// Another class matches nothing; limit 0 only counts.
	ts.View(func(tx *Tx) error {
		if page, next, total, err := tx.DeadSearch("mail", match, 0, true, 5); len(page) != 0 || next != 0 || total != 0 || err != nil {
			t.Errorf("class mail: %d, %d, %d, %v", len(page), next, total, err)
		}
		if page, _, total, err := tx.DeadSearch("", match, 0, false, 0); len(page) != 0 || total != len(want) || err != nil {
			t.Errorf("limit 0: %d, total %d, %v", len(page), total, err)
		}
		return nil
	})

	ts.rawUpdate(t, func(tx *bolt.Tx) error { return tx.Bucket([]byte(BucketDead)).Put(key8(want[0]), []byte{1, 0xff}) })
	ts.View(func(tx *Tx) error {
		page, _, total, err := tx.DeadSearch("", match, 0, false, 3)
		var de *DecodeError
		if !errors.As(err, &de) || total != len(want)-1 || !slices.Equal(entryKeys(page), want[1:4]) {
			t.Errorf("with an undecodable record: %v, total %d, %v", entryKeys(page), total, err)
		}
		return nil
	})
}
