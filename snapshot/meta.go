package snapshot

import (
	"bytes"
	"strings"
)

// Keys of the meta bucket the runtime writes: the consumer group and the
// instance the file belongs to.
const (
	MetaGroup    = "group"
	MetaInstance = "instance"
)

// Meta returns a copy of the value under key in the meta bucket, and
// whether it is there.
func (tx *Tx) Meta(key string) ([]byte, bool, error) {
	b, err := tx.bucket(bucketMeta)
	if err != nil {
		return nil, false, tx.errorf(err, "read %s/%s", bucketMeta, key)
	}
	v := b.Get([]byte(key))
	if v == nil {
		return nil, false, nil
	}
	return bytes.Clone(v), true, nil
}

// PutMeta stores value under key in the meta bucket. The keys of the
// file format version and of its features are refused: the writers of
// records own them.
func (tx *Tx) PutMeta(key string, value []byte) error {
	if key == metaFormatKey || strings.HasPrefix(key, metaFeaturePrefix) {
		return tx.errorf(errReservedMeta, "write %s/%s", bucketMeta, key)
	}
	b, err := tx.bucket(bucketMeta)
	if err == nil {
		err = b.Put([]byte(key), bytes.Clone(value))
	}
	return tx.errorf(err, "write %s/%s", bucketMeta, key)
}
