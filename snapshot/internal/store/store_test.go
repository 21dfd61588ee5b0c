package store

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

func TestSavePendingRoundTrip(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	recs := []Record{fullRecord(0), {}, edgeRecords()["empty not nil"], edgeRecords()["many headers"], fullRecord(1)}
	keys, err := ts.savePending(recs...)
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{1, 2, 3, 4, 5}; !slices.Equal(keys, want) {
		t.Fatalf("keys %v, want %v", keys, want)
	}
	got, bad, err := ts.loadPending()
	if err != nil || len(bad) > 0 {
		t.Fatal(err, bad)
	}
	requireEntries(t, got, keys, recs)

	ts.reopen(t)
	got, bad, err = ts.loadPending()
	if err != nil || len(bad) > 0 {
		t.Fatal(err, bad)
	}
	requireEntries(t, got, keys, recs)
	if n, err := ts.count(BucketPending); err != nil || n != len(recs) {
		t.Fatalf("CountPending = %d, %v; want %d", n, err, len(recs))
	}
}

// TestSavePendingDeletesAndSaves checks the shutdown sequence across
// restarts: saved keys survive a reopen, one Update both deletes and
// saves, and keys are never reused.
func TestSavePendingDeletesAndSaves(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	recs := records(5)
	keys, err := ts.savePending(recs...)
	if err != nil {
		t.Fatal(err)
	}
	ts.reopen(t)
	got, _, err := ts.loadPending()
	if err != nil {
		t.Fatal(err)
	}
	requireEntries(t, got, keys, recs)

	more := records(7)[5:]
	var newKeys []uint64
	err = ts.Update(func(tx *Tx) error {
		if err := tx.DeletePending(keys[0], keys[2], 999); err != nil { // 999 is missing: not an error
			return err
		}
		var err error
		newKeys, err = tx.SavePending(more...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{6, 7}; !slices.Equal(newKeys, want) {
		t.Fatalf("new keys %v, want %v", newKeys, want)
	}
	ts.reopen(t)
	got, _, err = ts.loadPending()
	if err != nil {
		t.Fatal(err)
	}
	requireEntries(t, got, []uint64{2, 4, 5, 6, 7}, []Record{recs[1], recs[3], recs[4], more[0], more[1]})

	// Deleting everything then saving again does not reuse keys.
	if err := ts.deletePending(2, 4, 5, 6, 7); err != nil {
		t.Fatal(err)
	}
	ts.reopen(t)
	if k, err := ts.savePending(records(1)...); err != nil || !slices.Equal(k, []uint64{8}) {
		t.Fatalf("SavePending after emptying: %v, %v; want [8]", k, err)
	}
}

func TestSavePendingNothing(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	keys, err := ts.savePending()
	if err != nil || keys == nil || len(keys) != 0 {
		t.Fatalf("SavePending() = %#v, %v", keys, err)
	}
	if err := ts.deletePending(); err != nil {
		t.Fatal(err)
	}
	if keys, err := ts.saveDead(); err != nil || len(keys) != 0 {
		t.Fatalf("SaveDead() = %v, %v", keys, err)
	}
}

// TestSavePendingIsOneTransaction makes the delete half of an Update fail
// (the key holds a nested bucket) and checks that nothing was saved.
func TestSavePendingIsOneTransaction(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	ts.rawUpdate(t, func(tx *bolt.Tx) error {
		_, err := tx.Bucket([]byte(BucketPending)).CreateBucket(key8(0))
		return err
	})
	err := ts.Update(func(tx *Tx) error {
		if _, err := tx.SavePending(records(3)...); err != nil {
			return err
		}
		return tx.DeletePending(0)
	})
	if err == nil {
		t.Fatal("DeletePending of a nested bucket succeeded")
	}
	for _, want := range []string{"snapshot: delete 1 pending records in " + ts.path + ": ", "pending/0000000000000000"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if n, err := ts.count(BucketPending); err != nil || n != 0 {
		t.Fatalf("CountPending = %d, %v after a failed save; want 0", n, err)
	}
	// The nested bucket is reported on every load and never moved.
	for range 2 {
		got, bad, err := ts.loadPending()
		if err != nil || len(got) != 0 || len(bad) != 1 || !errors.Is(bad[0], ErrCorrupt) {
			t.Fatalf("LoadPending = %v, %v, %v", got, bad, err)
		}
	}
}

// TestSavePendingCrash saves from a child process that is killed right
// after SavePending returns, without Close, then checks the records.
func TestSavePendingCrash(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	cmd := helperCommand(t, "crash", path)
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Success() {
		t.Fatalf("helper: err = %v, want killed; output %q", err, out)
	}
	if !bytes.Equal(out, []byte("saved 1 2 3\n")) {
		t.Fatalf("helper output %q", out)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, bad, err := s.loadPending()
	if err != nil || len(bad) > 0 {
		t.Fatal(err, bad)
	}
	requireEntries(t, got, []uint64{1, 2, 3}, records(3))
}

func TestLockTimeout(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	// flock locks belong to the open file description, so a second
	// open in this process waits like a second process would.
	_, err := Open(ts.path, Options{LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: err = %v, want ErrLocked", err)
	}
	want := fmt.Sprintf("snapshot: state file in use: %s (waited 100ms)", ts.path)
	if err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	// Once the first one closes, the file opens.
	if err := ts.Store.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ts.path, Options{LockTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ts.Store = s
}

// TestLockTimeoutOtherProcess holds the lock in a child process.
func TestLockTimeoutOtherProcess(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	cmd := helperCommand(t, "lock", path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "locked\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper said %q, %v", line, err)
	}
	_, err = Open(path, Options{LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Errorf("Open while another process holds the file: err = %v, want ErrLocked naming %s", err, path)
	}
	_ = stdin.Close() // the helper closes its store and exits
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	s, err := Open(path, Options{LockTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

const helperEnv = "HANDOFF_SNAPSHOT_TEST_HELPER"

// helperCommand runs this test binary as TestHelperProcess in mode.
func helperCommand(t *testing.T, mode, path string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode+":"+path)
	cmd.Stderr = os.Stderr
	return cmd
}

// TestHelperProcess is the child of the multi-process tests; it is
// skipped in a normal run. Mode "lock" opens the store, says "locked" and
// waits for stdin to close; mode "crash" saves three records and kills
// itself before Close.
func TestHelperProcess(t *testing.T) {
	mode, path, ok := strings.Cut(os.Getenv(helperEnv), ":")
	if !ok {
		t.Skip("helper process for the multi-process tests")
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	switch mode {
	case "lock":
		fmt.Println("locked")
		_, _ = io.Copy(io.Discard, os.Stdin)
	case "crash":
		keys, err := s.savePending(records(3)...)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		out.WriteString("saved")
		for _, k := range keys {
			out.WriteString(" " + strconv.FormatUint(k, 10))
		}
		fmt.Println(out.String())
		p, _ := os.FindProcess(os.Getpid())
		_ = p.Kill()
		select {} // wait for the signal
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestLoadPendingQuarantinesCorrupt(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	recs := records(3)
	if _, err := ts.savePending(recs[:2]...); err != nil { // keys 1, 2
		t.Fatal(err)
	}
	garbage := []byte("\x01not a record at all")
	truncated := appendRecord(nil, &recs[0])
	truncated = truncated[:len(truncated)-3]
	ts.rawUpdate(t, func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(BucketPending))
		for _, kv := range []struct{ k, v []byte }{
			{key8(3), garbage},
			{key8(4), truncated},
			{[]byte("zz"), appendRecord(nil, &recs[0])}, // a valid record under a bad key
		} {
			if err := b.Put(kv.k, kv.v); err != nil {
				return err
			}
		}
		return b.SetSequence(4)
	})
	keys, err := ts.savePending(recs[2:]...) // key 5
	if err != nil {
		t.Fatal(err)
	}
	if keys[0] != 5 {
		t.Fatalf("key %d, want 5", keys[0])
	}
	if n, err := ts.count(BucketPending); err != nil || n != 6 {
		t.Fatalf("CountPending = %d, %v; want 6 (3 good, 3 bad)", n, err)
	}

	got, bad, err := ts.loadPending()
	if err != nil {
		t.Fatal(err)
	}
	requireEntries(t, got, []uint64{1, 2, 5}, recs)
	wantBad := []struct {
		key  []byte
		text string
	}{
		{key8(3), "snapshot: decode pending/0000000000000003: snapshot: corrupt record: "},
		{key8(4), "snapshot: decode pending/0000000000000004: snapshot: corrupt record: "},
		{[]byte("zz"), "snapshot: decode pending/7a7a: snapshot: corrupt record: key is 2 bytes, want 8"},
	}
	if len(bad) != len(wantBad) {
		t.Fatalf("%d decode errors, want %d: %v", len(bad), len(wantBad), bad)
	}
	for i, w := range wantBad {
		var de *DecodeError
		if !errors.As(bad[i], &de) || !errors.Is(bad[i], ErrCorrupt) {
			t.Fatalf("bad[%d] = %v, want a DecodeError wrapping ErrCorrupt", i, bad[i])
		}
		if de.Bucket != BucketPending || !bytes.Equal(de.Key, w.key) || !strings.HasPrefix(de.Error(), w.text) {
			t.Errorf("bad[%d] = %q, want key %x and prefix %q", i, de, w.key, w.text)
		}
	}

	q, err := ts.quarantined()
	if err != nil {
		t.Fatal(err)
	}
	if len(q) != 3 {
		t.Fatalf("%d quarantined, want 3", len(q))
	}
	for i, raw := range [][]byte{garbage, truncated, appendRecord(nil, &recs[0])} {
		if q[i].Key != uint64(i+1) || q[i].Bucket != BucketPending || !bytes.Equal(q[i].OrigKey, wantBad[i].key) ||
			!bytes.Equal(q[i].Raw, raw) || q[i].Err != bad[i].Err.Error() || q[i].At.IsZero() {
			t.Errorf("quarantined[%d] = %+v", i, q[i])
		}
	}

	// The next load is clean and returns the same records.
	ts.reopen(t)
	got, bad, err = ts.loadPending()
	if err != nil || len(bad) != 0 {
		t.Fatalf("second LoadPending: %v, %v", bad, err)
	}
	requireEntries(t, got, []uint64{1, 2, 5}, recs)
	if n, err := ts.count(BucketPending); err != nil || n != 3 {
		t.Fatalf("CountPending = %d, %v; want 3", n, err)
	}
}

func TestQuarantinedCorruptEntry(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	ts.rawUpdate(t, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(BucketQuarantine)).Put(key8(1), []byte{9, 9})
	})
	q, err := ts.quarantined()
	if err != nil {
		t.Fatal(err)
	}
	if len(q) != 1 || q[0].Key != 1 || q[0].Bucket != "" || !bytes.Equal(q[0].Raw, []byte{9, 9}) ||
		!strings.Contains(q[0].Err, "unknown format version 9") {
		t.Fatalf("Quarantined = %+v", q)
	}
}

func TestDead(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	recs := records(4)
	keys, err := ts.saveDead(recs[:2]...)
	if err != nil {
		t.Fatal(err)
	}

	// Single saves from many goroutines share Batch transactions.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		more = map[uint64]int{}
	)
	for i := range 20 {
		wg.Go(func() {
			var k []uint64
			err := ts.Batch(func(tx *Tx) (err error) { k, err = tx.SaveDead(recs[2+i%2]); return err })
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			more[k[0]] = i
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(more) != 20 {
		t.Fatalf("%d distinct keys from 20 saves", len(more))
	}

	ts.reopen(t)
	got, bad, err := ts.dead()
	if err != nil || len(bad) > 0 {
		t.Fatal(err, bad)
	}
	if len(got) != 22 {
		t.Fatalf("%d dead letters, want 22", len(got))
	}
	requireEntries(t, got[:2], keys, recs[:2])
	for i, e := range got[2:] {
		if i > 0 && e.Key <= got[1+i].Key {
			t.Fatalf("dead letters out of key order: %d after %d", e.Key, got[1+i].Key)
		}
		requireEqualRecord(t, e.Record, recs[2+more[e.Key]%2])
	}

	if err := ts.deleteDead(keys[0], 12345); err != nil {
		t.Fatal(err)
	}
	got, _, err = ts.dead()
	if err != nil || len(got) != 21 || got[0].Key != keys[1] {
		t.Fatalf("after DeleteDead: %d entries, first %v, %v", len(got), got[0].Key, err)
	}
	if n, err := ts.count(BucketPending); err != nil || n != 0 {
		t.Fatalf("dead letters counted as pending: %d, %v", n, err)
	}
}

// TestDeadCorruptIsNotMoved checks that Dead only reads.
func TestDeadCorruptIsNotMoved(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	keys, err := ts.saveDead(records(1)...)
	if err != nil {
		t.Fatal(err)
	}
	ts.rawUpdate(t, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(BucketDead)).Put(key8(keys[0]+1), []byte{1})
	})
	for range 2 {
		got, bad, err := ts.dead()
		if err != nil || len(got) != 1 || len(bad) != 1 {
			t.Fatalf("Dead = %d entries, %v, %v", len(got), bad, err)
		}
		if want := "snapshot: decode dead/0000000000000002: "; !strings.HasPrefix(bad[0].Error(), want) {
			t.Fatalf("error %q, want prefix %q", bad[0], want)
		}
	}
	if q, err := ts.quarantined(); err != nil || len(q) != 0 {
		t.Fatalf("Quarantined = %v, %v; want none", q, err)
	}
}

func TestDeletePendingConcurrent(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	keys, err := ts.savePending(records(40)...)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			// Overlapping deletes: each key twice.
			if err := ts.deletePending(keys[i*4 : i*4+4]...); err != nil {
				t.Error(err)
			}
			if err := ts.deletePending(keys[(i*4+2)%40], keys[(i*4+3)%40]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n, err := ts.count(BucketPending); err != nil || n != 0 {
		t.Fatalf("CountPending = %d, %v; want 0", n, err)
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	ts := setup(t)
	if err := ts.Store.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ts.Store.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if ts.Path() != ts.path {
		t.Fatalf("Path() = %q after Close, want %q", ts.Path(), ts.path)
	}
	_, err := ts.savePending(records(1)...)
	if !errors.Is(err, berrors.ErrDatabaseNotOpen) || !strings.Contains(err.Error(), ts.path) {
		t.Fatalf("SavePending after Close: %v", err)
	}
}

func TestCloseNoSync(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.savePending(records(2)...); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, err := s.count(BucketPending); err != nil || n != 2 {
		t.Fatalf("CountPending = %d, %v; want 2", n, err)
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	notBolt := filepath.Join(dir, "not-bolt.db")
	if err := os.WriteFile(notBolt, bytes.Repeat([]byte("x"), 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(notBolt, Options{}); err == nil || !strings.HasPrefix(err.Error(), "snapshot: open "+notBolt+": ") {
		t.Errorf("Open of a non-bbolt file: %v", err)
	}

	missingDir := filepath.Join(dir, "missing", "state.db")
	if _, err := Open(missingDir, Options{}); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missingDir) {
		t.Errorf("Open in a missing directory: %v", err)
	}

	newer := filepath.Join(dir, "newer.db")
	db, err := bolt.Open(newer, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte(bucketMeta))
		if err != nil {
			return err
		}
		return b.Put([]byte(metaFormatKey), []byte{fileFormat + 1})
	})
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(newer, Options{}); !errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), "file format 4, this build reads formats 1 to 3") ||
		!strings.Contains(err.Error(), newer) {
		t.Errorf("Open of a newer format: %v", err)
	}
}
