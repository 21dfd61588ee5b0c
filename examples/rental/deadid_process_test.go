package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/handoff-go/handoff/internal/rental"
)

// deadRow is a dead letter of the admin API, read field by field (its
// key as raw JSON, so that the test reads any form of it).
type deadRow struct {
	Key json.RawMessage `json:"key"`
	ID  string          `json:"id"`
}

// deadIDs returns the dead letters pod lists of its own state file
// (scope=local): message ID -> dead letter key, as the API writes it (a
// JSON string's contents, or a number).
func (p *pod) deadIDs() (map[string]string, error) {
	rows, err := pages[deadRow](p, "/api/dead?scope=local", "dead_letters")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, r := range rows {
		out[r.ID] = strings.Trim(string(r.Key), `"`)
	}
	return out, nil
}

// post posts to path of pod's admin API with the deployment's token and
// returns the status and body.
func (p *pod) post(t *testing.T, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", p.admin+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+deployToken)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST %s on %s: %v", path, p.name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(bytes.TrimSpace(b))
}

var deadIDText = regexp.MustCompile(`^[0-9a-f]{16}-[1-9][0-9]*$`)

// TestProcessDeadLetterIDAcrossPods runs two rental processes as a
// Deployment does (new instance names, empty state directories) with
// poison orders on every partition. A dead letter has one ID: the two
// pods' admin APIs list each dead letter of the partitions they own
// under IDs no other dead letter has; a discard posted to the pod that
// does not own the dead letter (as `kubectl port-forward deploy/rental`
// may pick) is carried out by the owning pod: exactly that dead letter
// is deleted; and after the other pod stops, the survivor lists every remaining dead
// letter under the ID it had.
func TestProcessDeadLetterIDAcrossPods(t *testing.T) {
	t.Parallel()
	bin := rentalBinary(t)
	const partitions = 4
	broker := startBroker(t, partitions)
	d := newDeployment(t, bin, broker, "deadid", nil)
	d.start(0)
	d.start(1)
	for i := range 2 {
		d.pods[i].s.waitLog(t, reAssigned, 60*time.Second)
	}

	// Three poison orders on each partition, each with a key of its own.
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	var batch []*kgo.Record
	for p := range partitions {
		for i := range 3 {
			batch = append(batch, &kgo.Record{Topic: rental.TopicOrders, Partition: int32(p),
				Key: fmt.Appendf(nil, "order-%d-%d", p, i), Value: fmt.Appendf(nil, `{"seq":%d,"poison":true}`, 10*p+i)})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err = cl.ProduceSync(ctx, batch...).FirstErr()
	cancel()
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}

	// Both pods own partitions and their dead letters; together all of
	// them.
	var on [2]map[string]string
	deadline := time.Now().Add(90 * time.Second)
	for {
		var errs []error
		for i := range 2 {
			if on[i], err = d.pods[i].deadIDs(); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == 0 && len(on[0]) > 0 && len(on[1]) > 0 && len(on[0])+len(on[1]) == len(batch) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dead letters listed by the two pods: %v and %v (errors %v), want %d in all, some on each", on[0], on[1], errs, len(batch))
		}
		time.Sleep(200 * time.Millisecond)
	}
	owner := map[string]int{} // dead letter ID -> the pod that lists it
	for i := range 2 {
		for msg, id := range on[i] {
			if !deadIDText.MatchString(id) {
				t.Errorf("%s lists dead letter %s as %q, want 16 hex digits, a dash and a number", d.pods[i].name, msg, id)
			}
			if j, dup := owner[id]; dup {
				t.Errorf("dead letter ID %s names a dead letter on %s and another on %s", id, d.pods[j].name, d.pods[i].name)
			}
			owner[id] = i
		}
	}

	// Through the pod that does not own it (issue 45: it used to be
	// refused with 409): the owner carries it out, exactly that dead
	// letter, and the pod that was asked answers with the outcome.
	var msg1, id1 string // a dead letter pod 1 owns
	for msg1, id1 = range on[1] {
		break
	}
	if code, body := d.pods[0].post(t, "/api/dead/"+id1+"/discard"); code != http.StatusOK {
		t.Fatalf("discard of %s's dead letter %s through %s: %d %s; want 200 (carried out by the owner)", d.pods[1].name, id1, d.pods[0].name, code, body)
	}
	delete(on[1], msg1)
	for i := range 2 {
		if got, err := d.pods[i].deadIDs(); err != nil || !maps.Equal(got, on[i]) {
			t.Errorf("after the discard of %s (%s) %s lists %v (%v), want %v", id1, msg1, d.pods[i].name, got, err, on[i])
		}
	}
	if code, body := d.pods[1].post(t, "/api/dead/"+id1+"/discard"); code != http.StatusNotFound {
		t.Errorf("discard of the discarded %s through its owner %s: %d %s; want 404", id1, d.pods[1].name, code, body)
	}

	// Pod 0 stops as a scale-in stops it: pod 1 restores its partitions
	// and lists every remaining dead letter under the ID it had.
	d.pods[0].s.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.pods[0].s.wait(t); !stoppedWell(t, d.pods[0].name, code, d.pods[0].s.stderrText()) {
		t.Fatalf("SIGTERM %s: exit %d\nstderr:\n%s", d.pods[0].name, code, d.pods[0].s.stderrText())
	}
	d.pods[0] = nil
	want := maps.Clone(on[1])
	maps.Copy(want, on[0])
	deadline = time.Now().Add(60 * time.Second)
	for {
		got, err := d.pods[1].deadIDs()
		if err == nil && maps.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s's restore of the other pod's partitions it lists %v (%v), want %v", d.pods[1].name, got, err, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
	d.stopAll()
}
