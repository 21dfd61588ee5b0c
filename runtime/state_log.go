package runtime

import (
	"slices"
	"time"

	"github.com/handoff-go/handoff/runtime/internal/kclient"
	"github.com/handoff-go/handoff/snapshot"
)

// The state file's changelog bookkeeping as the changelog side (restore,
// follow, ownership, repartition) asks for it: each is one transaction,
// the only one its caller opens.

// fileID returns the file's changelog ID; ok is false while it has none.
func (f *stateFile) fileID() (id [16]byte, ok bool, err error) { return f.store.FileID() }

// owner returns, in one read, the file's changelog ID (hasOwn false
// while it has none) and the file the latest owner marker of topic's
// partition p that this file remembers names (known false for none).
func (f *stateFile) owner(topic string, p int32) (own [16]byte, hasOwn bool, owner [16]byte, known bool, err error) {
	return f.store.Owner(topic, p)
}

// setOwner remembers owner as the file the latest owner marker of
// topic's partition p names, in the file alone.
func (f *stateFile) setOwner(topic string, p int32, owner [16]byte) error {
	return f.store.SetOwner(topic, p, owner)
}

// noteOwner is setOwner that also returns the file's changelog ID, read
// in the same write.
func (f *stateFile) noteOwner(topic string, p int32, owner [16]byte) (own [16]byte, err error) {
	return f.store.NoteOwner(topic, p, owner)
}

// hasCheckpoint reports whether the file keeps a changelog checkpoint of
// topic's partition p.
func (f *stateFile) hasCheckpoint(topic string, p int32) (known bool, err error) {
	_, known, err = f.store.Checkpoint(topic, p)
	return known, err
}

// setRoutedBy records, in the file alone, that p's changelog was read
// whole and its records moved by partition count n.
func (f *stateFile) setRoutedBy(p kclient.Partition, n int32) error {
	return f.store.SetRoutedBy(p.Topic, int32(p.Partition), n)
}

// routedBy returns the partition count by which p's changelog was last
// read whole here; 0 when never, or when the file cannot tell.
func (f *stateFile) routedBy(p kclient.Partition) int32 {
	return f.store.RoutedBy(p.Topic, int32(p.Partition))
}

// readApplied reads back, in one read, the records a follow applied:
// block is called with each dead letter and each delayed record waiting
// for its redelivery, and the pending ones are returned. Records gone or
// undecodable are skipped.
func (f *stateFile) readApplied(applied snapshot.Applied, block func(snapshot.Record)) ([]snapshot.Entry, error) {
	return f.store.ReadApplied(applied, func(rec *snapshot.Record) bool { return rec.Reason == reasonRedelivery }, block)
}

// eachApplied calls each, in one read, with the read of every pending,
// dead and delayed record applied holds, in that order; a failed read
// ends nothing.
func (f *stateFile) eachApplied(applied snapshot.Applied, each func(rec snapshot.Record, ok bool, err error)) {
	f.store.EachApplied(applied, each)
}

// applyFollowed applies recs, other instances' writes to topic's
// partition p read by a follow, to the file alone, from the file's
// checkpoint of p (0 without one) without moving it, and gives the
// records of renamed classes their new names, in one write.
func (l *stateLog) applyFollowed(topic string, p int32, recs []snapshot.ChangelogRecord) (applied snapshot.Applied, err error) {
	return l.state.store.ApplyFollowed(topic, p, recs, l.renames)
}

// The choices between the state's two paths, with the changelog (on) and
// with the file alone, that the components leave to the state owner.

// mine reports whether rec, a stored record, is this instance's to use:
// every record is with the changelog off; else as owns.
func (l *stateLog) mine(rec *snapshot.Record) bool { return !l.on() || l.owns(rec) }

// ownedParked returns how many of pc's parked records this instance owns
// and when the first of them was parked; ok is false when it owns none.
// With the changelog off it returns pc's count and oldest without a read;
// with it, it reads the key's records (leaving out undecodable ones).
func (l *stateLog) ownedParked(pc snapshot.ParkedCount) (count int, oldest time.Time, ok bool, err error) {
	if !l.on() {
		return pc.Count, pc.Oldest, true, nil
	}
	entries, err := l.state.readParked(pc.Class, pc.Key)
	if err != nil {
		return 0, time.Time{}, false, err
	}
	entries = slices.DeleteFunc(entries, func(e snapshot.ParkedEntry) bool { return !l.owns(&e.Record) })
	if len(entries) == 0 {
		return 0, time.Time{}, false, nil
	}
	return len(entries), entries[0].Record.SavedAt, true, nil
}

// startRecovers is the filter of the records the start's recovery
// recovers: nil (all) with the changelog off, else those that belong to
// no partition (unrouted; the assignments recover the others).
func (l *stateLog) startRecovers() func(*snapshot.Record) bool {
	if !l.on() {
		return nil
	}
	return l.unrouted
}

// resendAtStop is the stop's last resend of the messages whose changelog
// write failed (resend); nothing with the changelog off.
func (l *stateLog) resendAtStop() {
	if l.on() {
		l.resend()
	}
}

// keepCheckpointsAtStop keeps every owned partition's checkpoint in the
// file (keepCheckpoints); nothing with the changelog off.
func (l *stateLog) keepCheckpointsAtStop() {
	if l.on() {
		l.keepCheckpoints(nil)
	}
}

// pauseChange makes a pause or a resume of class: with the changelog
// off, local alone (the change in this file and pool); with it, through
// pauseLocal, which also writes it to the meta topic with write (its
// failure wrapped in errMetaWrite, the change here staying).
func (l *stateLog) pauseChange(class string, local func() error, write func(at time.Time) (int64, error)) error {
	if !l.on() {
		return local()
	}
	_, err := l.pauseLocal(class, local, write)
	return err
}
