package store

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// testFeature stands for a feature a newer version adds: this test build
// knows it, as that version would; TestFeatureNamedByOlderReader reads
// the file as a build without it.
var testFeature = feature{Name: "test-rollback", Desc: "test records in bucket pending, since handoff 9.9.9"}

func init() { knownFeatures[testFeature.Name] = true }

// TestOpenDoesNotMarkFormat: opening a file for writing, and writing the
// meta keys the runtime writes at every start, leaves its format mark as
// it was, so that the build before can still open it after a rollback;
// the transaction that writes the first format-2 record raises it. Before,
// Open marked every file format 2 at once and a rollback to the format-1
// build failed on a file this build had only opened.
func TestOpenDoesNotMarkFormat(t *testing.T) {
	t.Parallel()
	path := copyV1(t)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(func(tx *Tx) error { return tx.PutMeta(MetaInstance, []byte("rental-0")) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := fileFormatOf(t, path); !bytes.Equal(v, []byte{formatV1}) {
		t.Fatalf("format of a format-1 file after an open and a meta write: %x, want 01", v)
	}

	// A new file has no mark until its first record: every build reads it.
	fresh := filepath.Join(t.TempDir(), "fresh.db")
	s, err = Open(fresh, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := fileFormatOf(t, fresh); v != nil {
		t.Fatalf("format of a new file with no record: %x, want none", v)
	}
}

// TestFirstRecordMarksFormat: each way of writing a record raises the
// mark to the format of the records this build writes, in the same
// transaction; a transaction that fails leaves no mark.
func TestFirstRecordMarksFormat(t *testing.T) {
	t.Parallel()
	rec := fullRecord(1)
	writes := map[string]func(tx *Tx) error{
		"SavePending": func(tx *Tx) error { _, err := tx.SavePending(rec); return err },
		"SaveDead":    func(tx *Tx) error { _, err := tx.SaveDead(rec); return err },
		"SaveDelayed": func(tx *Tx) error {
			_, err := tx.SaveDelayed(Delayed{Due: time.Unix(1e9, 0), Record: rec})
			return err
		},
		"Park": func(tx *Tx) error { return tx.Park("orders", []byte("k"), rec) },
	}
	for name, write := range writes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := copyV1(t)
			s, err := Open(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			failed := errors.New("rolled back")
			if err := s.Update(func(tx *Tx) error { return errors.Join(write(tx), failed) }); !errors.Is(err, failed) {
				t.Fatalf("Update: %v", err)
			}
			if err := s.View(func(tx *Tx) error {
				if v, _, _ := tx.Meta(metaFormatKey); !bytes.Equal(v, []byte{formatV1}) {
					t.Errorf("format after a rolled-back write: %x, want 01", v)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := s.Update(write); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if v := fileFormatOf(t, path); !bytes.Equal(v, []byte{recordsFormat}) {
				t.Fatalf("format after %s: %x, want %02x", name, v, recordsFormat)
			}
		})
	}
}

// writeNewerFile writes a state file as a newer version with a feature
// this build does not know would leave it.
func writeNewerFile(t *testing.T, name, desc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "newer.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(func(tx *Tx) error { _, err := tx.SavePending(fullRecord(1)); return err }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte(bucketMeta))
		return errors.Join(meta.Put([]byte(metaFormatKey), []byte{formatFeatures}),
			meta.Put([]byte(metaFeaturePrefix+name), []byte(desc)))
	})
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestUnknownFeatureNamed: a file a newer version wrote a record of an
// unknown feature into is refused, by both opens, with an error that
// names the file, the feature and what the newer version said it is.
func TestUnknownFeatureNamed(t *testing.T) {
	t.Parallel()
	path := writeNewerFile(t, "changelog", "changelog checkpoints in bucket changelog, since handoff 0.3.0")
	for _, ro := range []bool{false, true} {
		_, err := Open(path, Options{ReadOnly: ro})
		fe, ok := errors.AsType[*FormatError](err)
		if !ok || !errors.Is(err, ErrNewerFormat) {
			t.Fatalf("Open(ReadOnly %v): %v, want a *FormatError", ro, err)
		}
		if fe.Format != formatFeatures || fe.Features["changelog"] == "" {
			t.Errorf("FormatError %+v", fe)
		}
		for _, want := range []string{path, "changelog (changelog checkpoints in bucket changelog, since handoff 0.3.0)"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Open(ReadOnly %v) error does not name %q: %v", ro, want, err)
			}
		}
	}
}

// TestFeatureNamedByOlderReader: needFeature marks the file in the
// transaction of its first record; this build (which knows the feature)
// opens it again, and a build without the feature names it.
func TestFeatureNamedByOlderReader(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(func(tx *Tx) error {
		if err := tx.needFeature(testFeature); err != nil {
			return err
		}
		_, err := tx.SavePending(fullRecord(1))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	err = s.Update(func(tx *Tx) error { return tx.needFeature(feature{Name: "not-registered"}) })
	if err == nil || !strings.Contains(err.Error(), `"not-registered"`) {
		t.Errorf("needFeature of a feature this build does not read: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := fileFormatOf(t, path); !bytes.Equal(v, []byte{formatFeatures}) {
		t.Fatalf("format %x, want %02x", v, formatFeatures)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("this build reopens its own file: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		_, err := checkMark(path, tx.Bucket([]byte(bucketMeta)), map[string]bool{})
		return err
	})
	if fe, ok := errors.AsType[*FormatError](err); !ok || fe.Features[testFeature.Name] != testFeature.Desc {
		t.Fatalf("an older reader's check: %v, want the feature named with its description", err)
	}
}
