package snapshot

import (
	"maps"
	"slices"
	"strconv"

	"github.com/handoff-go/handoff/snapshot/internal/store"
)

// The changelog's bookkeeping in the file (its ID, the owner markers
// remembered, the checkpoints, the partition count records were routed
// by) and the applies of what a restore or a follow read.

// fileID returns the file's changelog ID; ok is false while it has none.
func (s *State) fileID() (id [16]byte, ok bool, err error) {
	err = s.st.View(func(tx *store.Tx) (err error) { id, ok, err = tx.ChangelogFileID(); return err })
	return id, ok, err
}

// owner returns, in one read, the file's changelog ID (hasOwn false
// while it has none) and the file the latest owner marker of topic's
// partition p that this file remembers names (known false for none).
func (s *State) owner(topic string, p int32) (own [16]byte, hasOwn bool, owner [16]byte, known bool, err error) {
	err = s.st.View(func(tx *store.Tx) (err error) {
		if own, hasOwn, err = tx.ChangelogFileID(); err != nil {
			return err
		}
		owner, known, err = tx.ChangelogOwner(topic, p)
		return err
	})
	return own, hasOwn, owner, known, err
}

// setOwner remembers owner as the file the latest owner marker of
// topic's partition p names, in the file alone.
func (s *State) setOwner(topic string, p int32, owner [16]byte) error {
	return s.st.BatchLocal(func(tx *store.Tx) error { return tx.SetChangelogOwner(topic, p, owner) })
}

// noteOwner is setOwner that also returns the file's changelog ID, read
// in the same write.
func (s *State) noteOwner(topic string, p int32, owner [16]byte) (own [16]byte, err error) {
	err = s.st.BatchLocal(func(tx *store.Tx) (err error) {
		if own, _, err = tx.ChangelogFileID(); err != nil {
			return err
		}
		return tx.SetChangelogOwner(topic, p, owner)
	})
	return own, err
}

// checkpoint returns the changelog offset the file has applied topic's
// partition p up to; known is false when it keeps none.
func (s *State) checkpoint(topic string, p int32) (next int64, known bool, err error) {
	err = s.st.View(func(tx *store.Tx) (err error) { next, known, err = tx.ChangelogCheckpoint(topic, p); return err })
	return next, known, err
}

// Checkpoint is one partition's changelog checkpoint.
type Checkpoint struct {
	Topic     string
	Partition int32
	Next      int64
}

// KeepCheckpoints writes cps to the file alone, in one write.
func (s *State) KeepCheckpoints(cps []Checkpoint) error {
	return s.st.UpdateLocal(func(tx *store.Tx) error {
		for _, cp := range cps {
			if err := tx.SetChangelogCheckpoint(cp.Topic, cp.Partition, cp.Next); err != nil {
				return err
			}
		}
		return nil
	})
}

// routedMetaPrefix prefixes the state file's meta key, per input
// partition, of the partition count by which the file last read that
// partition's changelog whole and moved what routes elsewhere.
const routedMetaPrefix = "changelog-routed/"

// routedKey is the meta key of topic's partition p's last move.
func routedKey(topic string, p int32) string {
	return routedMetaPrefix + topic + "/" + strconv.Itoa(int(p))
}

// setRoutedBy records, in the file alone, that topic's partition p's
// changelog was read whole and its records moved by partition count n.
func (s *State) setRoutedBy(topic string, p int32, n int32) error {
	return s.st.UpdateLocal(func(tx *store.Tx) error {
		return tx.PutMeta(routedKey(topic, p), []byte(strconv.Itoa(int(n))))
	})
}

// routedBy returns the partition count by which topic's partition p's
// changelog was last read whole here; 0 when never, or when the file
// cannot tell.
func (s *State) routedBy(topic string, p int32) int32 {
	var n int32
	_ = s.st.View(func(tx *store.Tx) error {
		v, ok, err := tx.Meta(routedKey(topic, p))
		if err != nil || !ok {
			return err
		}
		m, err := strconv.Atoi(string(v))
		n = int32(m)
		return err
	})
	return n
}

// ReadApplied reads back, in one read, the records a follow applied:
// block is called with each dead letter and each delayed record that
// blocks accepts (nil: none), and the pending ones are returned. Records
// gone or undecodable are skipped.
func (s *State) ReadApplied(applied Applied, blocks func(*Record) bool, block func(Record)) ([]Entry, error) {
	var pending []Entry
	err := s.st.View(func(tx *store.Tx) error {
		for _, k := range applied.Dead {
			if rec, ok, err := tx.GetDead(k); ok && err == nil {
				block(rec)
			}
		}
		for _, k := range applied.Delayed {
			if rec, ok, err := tx.GetDelayed(k); ok && err == nil && blocks != nil && blocks(&rec) {
				block(rec)
			}
		}
		for _, k := range applied.Pending {
			rec, ok, err := tx.GetPending(k)
			if ok && err == nil {
				pending = append(pending, Entry{Key: k, Record: rec})
			}
		}
		return nil
	})
	return pending, err
}

// applyFollowed applies recs, other instances' writes to topic's
// partition p read by a follow, to the file alone, from the file's
// checkpoint of p (0 without one) without moving it, and gives the
// records of renamed classes their new names (renames, from -> to), in
// one write.
func (s *State) applyFollowed(topic string, p int32, recs []ChangelogRecord, renames map[string]string) (applied Applied, err error) {
	err = s.st.BatchLocal(func(tx *store.Tx) error {
		kept, ok, err := tx.ChangelogCheckpoint(topic, p)
		if err != nil {
			return err
		}
		if !ok {
			kept = 0
		}
		if applied, err = tx.ApplyChangelog(topic, p, recs, kept); err != nil {
			return err
		}
		return renameApplied(tx, applied, renames)
	})
	return applied, err
}

// restoreOpts is how a restore applies what it read of a partition's
// changelog.
type restoreOpts struct {
	// Rebuild replaces the file's records of the partition by what the
	// read holds (the partition was owned elsewhere since): those that
	// Belongs accepts and the read does not hold are dropped. Else the
	// read is applied as the changes since the file's checkpoint.
	Rebuild bool
	Belongs func(*Record) bool
	// Latest, when set, is remembered as the file the latest owner
	// marker the read held names.
	Latest *[16]byte
	// Renames gives the applied records of renamed classes their new
	// names (from -> to).
	Renames map[string]string
}

// applyRestore applies recs, read of topic's partition p up to next, to
// the file alone as r says, in one write, and moves p's checkpoint to
// next. dropped counts the records a rebuild dropped.
func (s *State) applyRestore(topic string, p int32, recs []ChangelogRecord, next int64, r restoreOpts) (applied Applied, dropped int, err error) {
	err = s.st.BatchLocal(func(tx *store.Tx) (err error) {
		if r.Rebuild {
			applied, dropped, err = tx.RebuildChangelog(topic, p, recs, next, r.Belongs)
		} else {
			applied, err = tx.ApplyChangelog(topic, p, recs, next)
		}
		if err == nil && r.Latest != nil {
			err = tx.SetChangelogOwner(topic, p, *r.Latest)
		}
		if err != nil {
			return err
		}
		return renameApplied(tx, applied, r.Renames)
	})
	return applied, dropped, err
}

// renameApplied gives the records an apply wrote whose class was renamed
// since they were written their new class, as the start does the file's:
// the changelog keeps the old name for the partition's next owner, which
// may start on an empty disk.
func renameApplied(tx *store.Tx, applied Applied, renames map[string]string) error {
	if len(renames) == 0 || len(applied.Pending)+len(applied.Dead)+len(applied.Delayed)+len(applied.Parked) == 0 {
		return nil
	}
	for _, from := range slices.Sorted(maps.Keys(renames)) {
		if _, err := tx.RenameClass(from, renames[from]); err != nil {
			return err
		}
	}
	return nil
}

// Identity returns the group and the instance the file was last run by;
// ok false for each it does not name yet.
func (s *State) Identity() (group []byte, groupOK bool, instance []byte, instanceOK bool, err error) {
	err = s.st.View(func(tx *store.Tx) (err error) {
		if group, groupOK, err = tx.Meta(store.MetaGroup); err != nil {
			return err
		}
		instance, instanceOK, err = tx.Meta(store.MetaInstance)
		return err
	})
	return group, groupOK, instance, instanceOK, err
}

// SetGroup records the file's group.
func (s *State) SetGroup(group string) error {
	return s.st.Update(func(tx *store.Tx) error { return tx.PutMeta(store.MetaGroup, []byte(group)) })
}

// SetInstance records the instance that runs the file.
func (s *State) SetInstance(instance string) error {
	return s.st.Update(func(tx *store.Tx) error { return tx.PutMeta(store.MetaInstance, []byte(instance)) })
}

// Classes returns the class names the file has seen.
func (s *State) Classes() (names []string, err error) {
	err = s.st.View(func(tx *store.Tx) (err error) { names, err = tx.Classes(); return err })
	return names, err
}

// AddClasses records names among the class names the file has seen.
func (s *State) AddClasses(names ...string) error {
	return s.st.Update(func(tx *store.Tx) error { _, err := tx.AddClasses(names...); return err })
}

// RenameClasses applies renames (from -> to) in one write, in from's
// order, and returns how many records of each bucket each from had.
func (s *State) RenameClasses(renames map[string]string) (map[string]map[string]int, error) {
	renamed := map[string]map[string]int{}
	err := s.st.Update(func(tx *store.Tx) error {
		for _, from := range slices.Sorted(maps.Keys(renames)) {
			counts, err := tx.RenameClass(from, renames[from])
			if err != nil {
				return err
			}
			renamed[from] = counts
		}
		return nil
	})
	return renamed, err
}

// Pauses returns the pauses the file keeps, by class.
func (s *State) Pauses() (pauses map[string]Pause, err error) {
	err = s.st.View(func(tx *store.Tx) (err error) { pauses, err = tx.Pauses(); return err })
	return pauses, err
}
