package store

import (
	"bytes"
	"errors"
	"strings"
)

// classPrefix starts the meta keys naming the classes of the services
// that ran on the file, one key per class (prefix and name) with an
// empty value: the operator CLI's pause refuses a class the file has
// never seen, which is most often a typo.
const classPrefix = "class/"

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
// file format version and of its features, and the changelog's (the file
// ID, the keys starting "changelog/" and "changelog-owner/", the
// complete mark), are refused: this package owns them.
func (tx *Tx) PutMeta(key string, value []byte) error {
	if key == metaFormatKey || strings.HasPrefix(key, metaFeaturePrefix) ||
		key == metaFileIDKey || strings.HasPrefix(key, metaCheckpointPrefix) ||
		strings.HasPrefix(key, metaOwnerPrefix) || key == metaLoggedKey {
		return tx.errorf(errReservedMeta, "write %s/%s", bucketMeta, key)
	}
	b, err := tx.bucket(bucketMeta)
	if err == nil {
		err = b.Put([]byte(key), bytes.Clone(value))
	}
	return tx.errorf(err, "write %s/%s", bucketMeta, key)
}

// AddClasses records names as classes the file has seen (a service that
// ran on it was configured with them) and returns how many were new.
// Recorded names are never removed: a class renamed or dropped was still
// seen. An empty name is refused.
func (tx *Tx) AddClasses(names ...string) (int, error) {
	b, err := tx.bucket(bucketMeta)
	if err != nil {
		return 0, tx.errorf(err, "record classes")
	}
	added := 0
	for _, name := range names {
		if name == "" {
			return added, tx.errorf(errors.New("empty class name"), "record classes")
		}
		key := []byte(classPrefix + name)
		if b.Get(key) != nil {
			continue
		}
		if err := b.Put(key, []byte{}); err != nil {
			return added, tx.errorf(err, "record class %q", name)
		}
		added++
	}
	return added, nil
}

// Classes returns the class names [Tx.AddClasses] recorded, in byte
// order; none for a file no service has recorded its classes in (one
// written before they were recorded).
func (tx *Tx) Classes() ([]string, error) {
	c, err := tx.cursor(bucketMeta)
	if err != nil {
		return nil, tx.errorf(err, "read classes")
	}
	var out []string
	prefix := []byte(classPrefix)
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		out = append(out, string(k[len(prefix):]))
	}
	return out, nil
}
