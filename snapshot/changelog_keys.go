package snapshot

import "github.com/handoff-go/handoff/snapshot/internal/store"

// What a reader of a changelog outside the file (the runtime's follow
// and its dead-letter owner lookup) asks of a changelog key, without
// parsing it itself.

// changelogDeadID returns the ID of the dead letter whose changelog key
// is key; ok is false for a key of another bucket, and for a key that
// does not parse (the restore reports it).
func changelogDeadID(key []byte) (id DeadID, ok bool) {
	ck, err := store.ParseChangelogKey(key)
	if err != nil {
		return DeadID{}, false
	}
	return store.DeadIDOf(ck)
}

// changelogWrittenBy reports whether the file with changelog ID id wrote
// the changelog record with key and writer: the writer the record names
// (an update or delete of a restored record, under the key of the file
// that created it), else the file its key names. A key that does not
// parse was written by no file.
func changelogWrittenBy(key, writer []byte, id [16]byte) bool {
	if writer != nil {
		return string(writer) == string(id[:])
	}
	ck, err := store.ParseChangelogKey(key)
	return err == nil && ck.FileID == id
}
