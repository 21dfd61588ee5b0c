package snapshot

import (
	"bytes"
	"fmt"
)

// Keys of [BucketMeta] the runtime writes: the consumer group and the
// instance the file belongs to.
const (
	MetaGroup    = "group"
	MetaInstance = "instance"
)

// Meta returns a copy of the value under key in [BucketMeta], and whether
// it is there. Safe for concurrent use.
func (s *Store) Meta(key string) ([]byte, bool, error) {
	var out []byte
	var ok bool
	err := s.view(func(tx *Tx) error {
		b, err := tx.bucket(BucketMeta)
		if err != nil {
			return err
		}
		if v := b.Get([]byte(key)); v != nil {
			out, ok = bytes.Clone(v), true
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("snapshot: read %s/%s in %s: %w", BucketMeta, key, s.path, err)
	}
	return out, ok, nil
}

// PutMeta stores value under key in [BucketMeta], in a transaction of its
// own. The key of the file format version is refused: [Open] owns it.
func (s *Store) PutMeta(key string, value []byte) error {
	if key == metaFormatKey {
		return fmt.Errorf("snapshot: write %s/%s in %s: reserved key", BucketMeta, key, s.path)
	}
	err := s.update(func(tx *Tx) error {
		b, err := tx.bucket(BucketMeta)
		if err != nil {
			return err
		}
		return b.Put([]byte(key), bytes.Clone(value))
	})
	if err != nil {
		return fmt.Errorf("snapshot: write %s/%s in %s: %w", BucketMeta, key, s.path, err)
	}
	return nil
}
