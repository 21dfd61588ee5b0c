package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/handoff-go/handoff/devbroker"
	"github.com/handoff-go/handoff/internal/recordjson"
	"github.com/handoff-go/handoff/internal/rental"
	"github.com/handoff-go/handoff/runtime"
)

// The process tests of the state changelog: instances started as an
// orchestrator starts a Deployment's pods, every start on a new, empty
// state directory under a new instance name, so that nothing a stopped
// or killed instance saved survives on its disk. What it held (the
// stop's snapshot, dead letters, parked and delayed messages) survives
// only in the changelog topics, restored by each partition's next owner.

// TestProcessDeployEmptyDisks runs three rental processes on empty
// disks through three rolling restarts (SIGTERM, a 20ms drain) and two
// SIGKILLs, each replaced by a new instance on a new, empty state
// directory, while a stream of orders (ordered; a few poison, so their
// keys park), users (some with a handoff-deliver-at header, due seconds
// later; failed attempts redelivered after 1s) and heartbeats is produced,
// 5% of handler attempts failing. Once everything settled it asserts, from
// the effects file and the admin API of the last three instances: every
// produced record is handled, a dead letter, or parked behind its key's
// dead letter (lost = 0, none still delayed); no order of the ordered
// class was first handled after a later offset of its key; no delayed
// record was handled before its due time. It reports the duplicates
// (the SIGKILLs allow them).
func TestProcessDeployEmptyDisks(t *testing.T) {
	t.Parallel() // its own broker, directories and processes
	bin := rentalBinary(t)
	res := deployEmptyDisks(t, bin, false)
	if res.lost != 0 {
		t.Errorf("lost %d of %d records on empty disks with the changelog on (%s)", res.lost, res.produced, res.lostBy)
	}
	if res.inversions != 0 {
		t.Errorf("%d per-key order inversions in the ordered class (%s)", res.inversions, rental.TopicOrders)
	}
	if res.delayed != 0 {
		t.Errorf("%d delayed records still not handled at the end, all past their due time", res.delayed)
	}
	if res.early != 0 {
		t.Errorf("%d delayed records handled before their due time", res.early)
	}
}

// TestProcessDeployEmptyDisksLocalOnly is TestProcessDeployEmptyDisks
// with -local-state-only on every process: what a stopped or killed
// instance held in its state file is gone with its directory, so records
// are lost. It shows that the scenario can tell.
func TestProcessDeployEmptyDisksLocalOnly(t *testing.T) {
	t.Parallel() // its own broker, directories and processes
	bin := rentalBinary(t)
	res := deployEmptyDisks(t, bin, true)
	if res.lost == 0 {
		t.Errorf("nothing lost on empty disks with -local-state-only: the scenario does not exercise the saved state")
	}
}

// deployResult is what a scenario counted at its end.
type deployResult struct {
	produced, lost, delayed, inversions, early int
	lostBy                                     string // the lost records per topic
}

// deployEmptyDisks runs the scenario of TestProcessDeployEmptyDisks,
// with -local-state-only on every process if localOnly, and returns its
// figures; it fails the test only for what the scenario itself needs (a
// process that does not start, a SIGTERM that does not exit 0).
func deployEmptyDisks(t *testing.T, bin string, localOnly bool) deployResult {
	began := time.Now()
	broker := startBroker(t, 4)
	var extra []string
	if localOnly {
		extra = append(extra, "-local-state-only")
	}
	d := newDeployment(t, bin, broker, "deploy", extra)
	stopProducing, prod := d.startAllAndProduce()
	defer stopProducing()

	// Three rolling restarts (each instance once) and two kills, under load.
	steps := []struct {
		slot int
		sig  syscall.Signal
	}{{0, syscall.SIGTERM}, {1, syscall.SIGKILL}, {2, syscall.SIGTERM}, {0, syscall.SIGKILL}, {1, syscall.SIGTERM}}
	for _, st := range steps {
		d.tail.waitMore(t, 400, 60*time.Second)
		d.replace(st.slot, st.sig, began)
	}
	d.tail.waitMore(t, 400, 60*time.Second)
	stopProducing()
	produced := <-prod

	acc := d.settle(produced, 90*time.Second, 10*time.Second)
	if !localOnly {
		// Every dead letter is still requeueable where it is listed; its
		// poison is not cured, so it comes back a dead letter (and its
		// key's parked messages stay parked): nothing may be lost by it.
		// A message that ran twice (a SIGKILL's redelivery) and is
		// poison is a dead letter twice: requeued twice, accounted once.
		n := d.requeueAll()
		if n < acc.dead {
			t.Errorf("requeued %d dead letters, %d accounted for", n, acc.dead)
		}
		time.Sleep(2 * time.Second)
		acc = d.settle(produced, 60*time.Second, 5*time.Second)
		t.Logf("requeued %d dead letters; after them: dead %d, parked %d, lost %d", n, acc.dead, acc.parked, acc.lost)
	}
	d.stopAll()
	d.tail.poll()
	st := effectStats(t, d.effects)
	early := d.tail.early(produced)
	res := deployResult{produced: len(produced), lost: acc.lost, delayed: acc.delayed, inversions: st.topicInversions[rental.TopicOrders], early: early, lostBy: acc.lostByTopic()}
	if acc.lost > 0 {
		t.Logf("lost records (topic/partition/offset key), first %d: %s", len(acc.lostSample), strings.Join(acc.lostSample, ", "))
	}
	if res.inversions > 0 {
		d.explainInversions(rental.TopicOrders, began)
	}
	t.Logf("local-state-only %v: produced %d (%d delayed by their header), handled %d unique, dead letters %d, parked %d, still delayed %d, lost %d (%s); duplicates %d, order inversions (orders) %d, delayed handled early %d; took %s",
		localOnly, len(produced), countDelayed(produced), acc.handled, acc.dead, acc.parked, acc.delayed, acc.lost, res.lostBy,
		st.lines-st.unique, res.inversions, early, time.Since(began).Round(100*time.Millisecond))
	return res
}

// TestProcessFencing stops one of three instances with SIGSTOP while it
// has work in flight and saved state (dead letters, delayed records),
// waits until the group gave all its partitions to the other two (its
// session expired), lets them work on its partitions (restoring its
// state from the changelog), then resumes it with SIGCONT: it finds its
// membership lost while it still holds handlers, a snapshot to write and
// offsets to commit. After everything settled and a final stop of all
// three: lost = 0, from the effects file and the admin API of the three.
// Duplicates are allowed (the stopped instance's handlers ran again on
// the new owners) and reported.
func TestProcessFencing(t *testing.T) {
	t.Parallel() // its own broker, directories and processes
	bin := rentalBinary(t)
	began := time.Now()
	broker := startBroker(t, 4)
	d := newDeployment(t, bin, broker, "fencing", nil)
	stopProducing, prod := d.startAllAndProduce()
	defer stopProducing()

	// Wait until instance 0 holds saved state: delayed records and dead
	// letters in its state file.
	frozen := d.pods[0]
	deadline := time.Now().Add(60 * time.Second)
	for {
		dead, _ := frozen.dead(t)
		delayed, _ := frozen.delayed(t)
		if len(dead) > 0 && len(delayed) > 0 {
			t.Logf("%s: instance %s holds %d dead letters and %d delayed records", since(began), frozen.name, len(dead), len(delayed))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance %s saved no dead letters and delayed records within 60s (%d, %d)", frozen.name, len(dead), len(delayed))
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.tail.waitMore(t, 200, 60*time.Second)
	frozen.s.cmd.Process.Signal(syscall.SIGSTOP)
	stoppedAt := time.Now()
	t.Logf("%s: SIGSTOP %s", since(began), frozen.name)
	// The other two hold every partition once the group expired it.
	total := len(rental.Topics()) * 4
	deadline = time.Now().Add(60 * time.Second)
	for {
		held := map[string]bool{}
		for _, p := range d.pods[1:] {
			evs, err := parseGroupEvents(p.s.stderrText())
			if err != nil {
				t.Fatal(err)
			}
			for q := range (memberRun{events: evs}).held(time.Now().Add(time.Second)) {
				held[q] = true
			}
		}
		if len(held) == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the two running instances hold %d of %d partitions 60s after the SIGSTOP", len(held), total)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%s: the other two hold all %d partitions, %s after the SIGSTOP", since(began), total, since(stoppedAt))
	d.tail.waitMore(t, 400, 60*time.Second)
	assigned := strings.Count(frozen.s.stderrText(), `msg="partitions assigned"`)
	frozen.s.cmd.Process.Signal(syscall.SIGCONT)
	t.Logf("%s: SIGCONT %s", since(began), frozen.name)
	// It runs on: it finds its membership lost and rejoins.
	deadline = time.Now().Add(30 * time.Second)
	for strings.Count(frozen.s.stderrText(), `msg="partitions assigned"`) == assigned && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%s: %s after the SIGCONT: assigned again %v", since(began), frozen.name, strings.Count(frozen.s.stderrText(), `msg="partitions assigned"`) > assigned)
	d.tail.waitMore(t, 400, 60*time.Second)
	stopProducing()
	produced := <-prod

	acc := d.settle(produced, 90*time.Second, 10*time.Second)
	d.stopAll()
	d.tail.poll()
	st := effectStats(t, d.effects)
	t.Logf("produced %d, handled %d unique, dead letters %d, parked %d, still delayed %d, lost %d (%s); duplicates %d, order inversions (orders) %d; took %s",
		len(produced), acc.handled, acc.dead, acc.parked, acc.delayed, acc.lost, acc.lostByTopic(),
		st.lines-st.unique, st.topicInversions[rental.TopicOrders], since(began))
	if acc.lost != 0 {
		t.Logf("lost records (topic/partition/offset key), first %d: %s", len(acc.lostSample), strings.Join(acc.lostSample, ", "))
		t.Errorf("lost %d of %d records after an instance was fenced (%s)", acc.lost, len(produced), acc.lostByTopic())
	}
}

// TestProcessKillDuringSnapshot starts one instance on a backlog it
// works slowly (500ms a message, a 10ms drain), so that its stop saves
// hundreds of messages; SIGTERMs it and SIGKILLs it as soon as it logs
// the end of the hard stop, the phase before the snapshot. A new
// instance on a new, empty state directory then handles the rest at
// full speed. It asserts lost = 0 (from the effects file and the new
// instance's admin API), none still delayed, and reports where the kill
// landed (before the snapshot was done, after it, after the commit) and
// the duplicates.
func TestProcessKillDuringSnapshot(t *testing.T) {
	t.Parallel() // its own broker, directories and processes
	bin := rentalBinary(t)
	began := time.Now()
	broker := startBroker(t, 4)
	d := newDeployment(t, bin, broker, "snapkill", nil)
	d.start(0, "-work", "500ms", "-work-jitter", "0s", "-drain-timeout", "10ms")
	slow := d.pods[0]
	slow.s.waitLog(t, reAssigned, 60*time.Second)
	ctx, stopProducing := context.WithTimeout(context.Background(), time.Second)
	defer stopProducing()
	produced := produceMixed(ctx, t, broker.Addrs(), 500, 100*time.Millisecond)
	d.tail.waitMore(t, 20, 60*time.Second)

	slow.s.cmd.Process.Signal(syscall.SIGTERM)
	phaseDone := func(phase string) *regexp.Regexp {
		return regexp.MustCompile(`msg="stop phase done" .*phase=` + phase + ` `)
	}
	hardStopDone := phaseDone("hard_stop")
	deadline := time.Now().Add(30 * time.Second)
	for !hardStopDone.MatchString(slow.s.stderrText()) {
		if time.Now().After(deadline) {
			t.Fatalf("no end of the hard stop logged within 30s of the SIGTERM\nstderr:\n%s", slow.s.stderrText())
		}
		time.Sleep(time.Millisecond)
	}
	slow.s.cmd.Process.Signal(syscall.SIGKILL)
	slow.s.wait(t)
	landed := "before the snapshot was done"
	switch log := slow.s.stderrText(); {
	case phaseDone("commit").MatchString(log):
		landed = "after the commit"
	case phaseDone("snapshot").MatchString(log):
		landed = "after the snapshot, before the commit was done"
	}
	saved := regexp.MustCompile(`phase=snapshot took=\S+ saved=(\d+)`).FindStringSubmatch(slow.s.stderrText())
	t.Logf("%s: SIGKILL %s %s (snapshot log %q); %d records produced", since(began), slow.name, landed, saved, len(produced))

	d.start(0, "-work", "0s", "-work-jitter", "0s")
	d.pods[0].s.waitLog(t, reAssigned, 60*time.Second)
	acc := d.settle(produced, 60*time.Second, 10*time.Second)
	d.stopAll()
	d.tail.poll()
	st := effectStats(t, d.effects)
	t.Logf("produced %d, handled %d unique, dead letters %d, parked %d, still delayed %d, lost %d (%s); duplicates %d; took %s",
		len(produced), acc.handled, acc.dead, acc.parked, acc.delayed, acc.lost, acc.lostByTopic(), st.lines-st.unique, since(began))
	if acc.lost != 0 || acc.delayed != 0 {
		t.Logf("lost records (topic/partition/offset key), first %d: %s", len(acc.lostSample), strings.Join(acc.lostSample, ", "))
		t.Errorf("lost %d of %d records, %d still delayed, after a SIGKILL %s and a restart on an empty directory", acc.lost, len(produced), acc.delayed, landed)
	}
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// deployment is three rental processes as an orchestrator runs them:
// slot i is the i-th replica; each start of a slot is a new pod, with a
// new instance name and a new, empty state directory.
type deployment struct {
	t       *testing.T
	bin     string
	broker  *devbroker.Broker
	group   string
	extra   []string // flags every process gets
	effects string
	tail    *effectsTail
	pods    [3]*pod
	all     []*pod // every pod started, in order, for explaining a failure
	started int    // pods started, for their names
	token   string // the admin token file every pod reads
}

// deployToken is the admin token of the deployments' pods.
const deployToken = "deploy-admin-token"

// requeueAll requeues every dead letter each live pod lists, through its
// admin API, and returns how many; a requeue refused fails the test: a
// dead letter must stay requeueable wherever it is listed, after any
// number of moves between pods.
func (d *deployment) requeueAll() int {
	t := d.t
	t.Helper()
	n := 0
	c := &http.Client{Timeout: 10 * time.Second}
	for _, p := range d.pods {
		if p == nil {
			continue
		}
		dead, err := p.dead(t)
		if err != nil {
			t.Fatal(err)
		}
		for _, dl := range dead {
			req, err := http.NewRequest("POST", fmt.Sprintf("%s/api/dead/%s/requeue", p.admin, dl.Key), nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+deployToken)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("requeue %s on %s: %v", dl.Key, p.name, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				t.Errorf("requeue of dead letter %s (%s) on %s: %s: %s", dl.Key, dl.ID, p.name, resp.Status, bytes.TrimSpace(body))
				continue
			}
			n++
		}
	}
	return n
}

// pod is one run of the rental binary.
type pod struct {
	name  string
	s     *service
	admin string // the admin API's base URL
}

func newDeployment(t *testing.T, bin string, broker *devbroker.Broker, group string, extra []string) *deployment {
	effects := filepath.Join(t.TempDir(), "effects.log")
	return &deployment{t: t, bin: bin, broker: broker, group: group, extra: extra, effects: effects, tail: newEffectsTail(t, effects)}
}

// start starts slot i's new pod on a new, empty state directory, with
// more flags after the deployment's (the last of a flag given twice
// wins).
func (d *deployment) start(i int, more ...string) {
	t := d.t
	t.Helper()
	d.started++
	name := fmt.Sprintf("%s-%d-%d", d.group, i, d.started)
	dir, err := os.MkdirTemp(t.TempDir(), "pod-")
	if err != nil {
		t.Fatal(err)
	}
	if d.token == "" {
		d.token = filepath.Join(t.TempDir(), "admin-token")
		if err := os.WriteFile(d.token, []byte(deployToken+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]string{"-brokers", d.broker.Addr(), "-group", d.group, "-instance", name,
		"-state", filepath.Join(dir, "rental.db"), "-drain-timeout", "20ms", "-work", "10ms", "-work-jitter", "5ms",
		"-fail-rate", "0.05", "-effects", d.effects, "-admin", "127.0.0.1:0", "-admin-token-file", d.token}, d.extra...)
	args = append(args, more...)
	s := startService(t, d.bin, args...)
	d.pods[i] = &pod{name: name, s: s, admin: "http://" + s.adminAddr(t)}
	d.all = append(d.all, d.pods[i])
}

// startAllAndProduce starts the three pods, waits for each one's first
// assignment, and produces the mixed stream in the background until the
// returned stop is called; the channel then gets what was produced.
func (d *deployment) startAllAndProduce() (stop context.CancelFunc, produced <-chan []producedRecord) {
	t := d.t
	t.Helper()
	for i := range 3 {
		d.start(i)
	}
	for i := range 3 {
		d.pods[i].s.waitLog(t, reAssigned, 60*time.Second)
	}
	ctx, stop := context.WithCancel(context.Background())
	prod := make(chan []producedRecord, 1)
	go func() { prod <- produceMixed(ctx, t, d.broker.Addrs(), 60, 100*time.Millisecond) }()
	return stop, prod
}

// replace stops slot i's pod with sig and starts its replacement; after
// a SIGTERM, whose exit must be 0, it waits for the replacement's first
// assignment (a Deployment's rollout waits for the new pod's readiness);
// after a SIGKILL it goes on (the group gives the partitions away only
// when the session expires).
func (d *deployment) replace(i int, sig syscall.Signal, began time.Time) {
	t := d.t
	t.Helper()
	old := d.pods[i]
	old.s.cmd.Process.Signal(sig)
	code := old.s.wait(t)
	what := "SIGKILL"
	if sig == syscall.SIGTERM {
		if !stoppedWell(t, old.name, code, old.s.stderrText()) {
			t.Fatalf("SIGTERM %s: exit %d\nstderr:\n%s", old.name, code, old.s.stderrText())
		}
		r := old.s.report(t)
		what = fmt.Sprintf("SIGTERM (saved %d, interrupted %d, drain %s)", r.Snapshotted, r.Interrupted, r.Drain.Round(time.Millisecond))
	}
	d.start(i)
	t.Logf("%s: %s %s, replaced by %s on an empty directory", since(began), what, old.name, d.pods[i].name)
	if sig == syscall.SIGTERM {
		d.pods[i].s.waitLog(t, reAssigned, 60*time.Second)
	}
}

// stopAll stops the live pods with SIGTERM, at once, and fails the test
// unless each exits 0.
func (d *deployment) stopAll() {
	t := d.t
	t.Helper()
	for _, p := range d.pods {
		if p != nil {
			p.s.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range d.pods {
		if p == nil {
			continue
		}
		if code := p.s.wait(t); !stoppedWell(t, p.name, code, p.s.stderrText()) {
			t.Errorf("final stop of %s: exit %d\nstderr:\n%s", p.name, code, p.s.stderrText())
		}
	}
}

// settle waits until every produced record is accounted for (see
// accounting) and none is still delayed, or the effects file did not grow for quiet, or limit
// passed, and returns the last accounting.
func (d *deployment) settle(produced []producedRecord, limit, quiet time.Duration) accounting {
	deadline := time.Now().Add(limit)
	lastLines, lastMove := -1, time.Now()
	for {
		acc := d.account(produced)
		if acc.lost == 0 && acc.delayed == 0 || time.Now().After(deadline) {
			return acc
		}
		if n := d.tail.count(); n != lastLines {
			lastLines, lastMove = n, time.Now()
		} else if time.Since(lastMove) > quiet {
			return acc
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// accounting is where each produced record is: handled (in the effects
// file), a dead letter, parked behind its key's dead letter or delayed
// (in the admin listings of the live pods), or lost.
type accounting struct {
	handled, dead, parked, delayed, lost int
	lostBy                               map[string]int // per topic
	// lostSample names the first lost records (topic/partition/offset
	// key), for the log.
	lostSample []string
}

func (a accounting) lostByTopic() string {
	var parts []string
	for _, topic := range rental.Topics() {
		parts = append(parts, fmt.Sprintf("%s %d", topic, a.lostBy[topic]))
	}
	return strings.Join(parts, ", ")
}

// account reads the effects file and the live pods' dead letters, parked
// keys and delayed records, and accounts for produced.
func (d *deployment) account(produced []producedRecord) accounting {
	t := d.t
	t.Helper()
	d.tail.poll()
	dead, delayed := map[string]bool{}, map[string]bool{}
	parked := map[string]int{} // class/key: count, the largest any pod lists
	for _, p := range d.pods {
		if p == nil {
			continue
		}
		ds, err := p.dead(t)
		if err != nil {
			t.Logf("%s: %v", p.name, err)
		}
		for _, m := range ds {
			dead[originID(m.Topic, m.Partition, m.Offset)] = true
		}
		ls, err := p.delayed(t)
		if err != nil {
			t.Logf("%s: %v", p.name, err)
		}
		for _, m := range ls {
			delayed[originID(m.Topic, m.Partition, m.Offset)] = true
		}
		ks, err := p.parked(t)
		if err != nil {
			t.Logf("%s: %v", p.name, err)
		}
		for _, k := range ks {
			id := k.Class + "/" + string(k.Key)
			parked[id] = max(parked[id], k.Count)
		}
	}
	acc := accounting{lostBy: map[string]int{}}
	for _, r := range produced {
		id := r.id()
		switch {
		case d.tail.handled(id):
			acc.handled++
		case dead[id]:
			acc.dead++
		case delayed[id]:
			acc.delayed++
		case r.topic == rental.TopicOrders && parked["orders/"+r.key] > 0:
			// Parked records are listed per key: the unhandled records
			// of a parked key, up to its count, are parked. The key's
			// partition's owner lists them all; a former owner may
			// still list a stale copy, never more: the largest count
			// any pod lists is the key's.
			parked["orders/"+r.key]--
			acc.parked++
		default:
			acc.lost++
			acc.lostBy[r.topic]++
			if len(acc.lostSample) < 10 {
				acc.lostSample = append(acc.lostSample, id+" "+r.key)
			}
		}
	}
	return acc
}

func originID(topic string, partition int, offset int64) string {
	return fmt.Sprintf("%s/%d/%d", topic, partition, offset)
}

// dead returns every dead letter the pod's admin API lists of its own
// state file (scope=local: the default lists the group's).
func (p *pod) dead(t *testing.T) ([]recordjson.Dead, error) {
	return pages[recordjson.Dead](p, "/api/dead?scope=local", "dead_letters")
}

// delayed returns every delayed record the pod's admin API lists.
func (p *pod) delayed(t *testing.T) ([]recordjson.Message, error) {
	return pages[recordjson.Message](p, "/api/delayed", "delayed")
}

// pages reads every page of a listing of the pod's admin API, whose
// items come under field and the next page's cursor under "next".
func pages[T any](p *pod, path, field string) ([]T, error) {
	var out []T
	after := ""
	for {
		var page map[string]json.RawMessage
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		if err := p.getJSON(path+sep+"limit=1000&after="+after, &page); err != nil {
			return out, err
		}
		var items []T
		if err := json.Unmarshal(page[field], &items); err != nil {
			return out, fmt.Errorf("admin GET %s: %s: %w", path, field, err)
		}
		out = append(out, items...)
		var next string
		if raw, ok := page["next"]; ok {
			if err := json.Unmarshal(raw, &next); err != nil {
				return out, fmt.Errorf("admin GET %s: next: %w", path, err)
			}
		}
		if next == "" {
			return out, nil
		}
		after = next
	}
}

// parked returns the parked keys the pod's admin API lists.
func (p *pod) parked(t *testing.T) ([]runtime.ParkedKey, error) {
	var body struct {
		Parked []struct {
			Class string `json:"class"`
			Key   []byte `json:"key"`
			Count int    `json:"count"`
		} `json:"parked"`
	}
	if err := p.getJSON("/api/parked", &body); err != nil {
		return nil, err
	}
	var out []runtime.ParkedKey
	for _, k := range body.Parked {
		out = append(out, runtime.ParkedKey{Class: k.Class, Key: k.Key, Count: k.Count})
	}
	return out, nil
}

// getJSON gets path from the pod's admin API into v.
func (p *pod) getJSON(path string, v any) error {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(p.admin + path)
	if err != nil {
		return fmt.Errorf("admin GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("admin GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("admin GET %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("admin GET %s: %w", path, err)
	}
	return nil
}

// effectsTail follows the shared effects file: the time the test first
// saw each record's line (never before the process wrote it).
type effectsTail struct {
	t    *testing.T
	path string

	mu      sync.Mutex
	read    int64  // bytes consumed
	partial []byte // a last line without its newline yet
	lines   int
	seen    map[string]time.Time // topic/partition/offset: first seen
}

func newEffectsTail(t *testing.T, path string) *effectsTail {
	return &effectsTail{t: t, path: path, seen: map[string]time.Time{}}
}

// poll reads what was appended since the last poll.
func (e *effectsTail) poll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	f, err := os.Open(e.path)
	if os.IsNotExist(err) {
		return
	}
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, e.read, 1<<40))
	if err != nil {
		e.t.Fatal(err)
	}
	e.read += int64(len(b))
	now := time.Now()
	b = append(e.partial, b...)
	i := bytes.LastIndexByte(b, '\n')
	if i < 0 {
		e.partial = b
		return
	}
	e.partial = slices.Clone(b[i+1:])
	for line := range strings.SplitSeq(string(b[:i]), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		e.lines++
		id := f[0] + "/" + f[1] + "/" + f[2]
		if _, ok := e.seen[id]; !ok {
			e.seen[id] = now
		}
	}
}

func (e *effectsTail) count() int {
	e.poll()
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lines
}

func (e *effectsTail) handled(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.seen[id]
	return ok
}

// waitMore waits, polling every 20ms, until n more lines were written
// than when it was called; past limit it fails the test.
func (e *effectsTail) waitMore(t *testing.T, n int, limit time.Duration) {
	t.Helper()
	want := e.count() + n
	deadline := time.Now().Add(limit)
	for e.count() < want {
		if time.Now().After(deadline) {
			t.Fatalf("the effects file did not get %d more lines within %s", n, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// early returns how many delayed records of produced were first seen
// handled before their due time.
func (e *effectsTail) early(produced []producedRecord) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, r := range produced {
		if at, ok := e.seen[r.id()]; ok && !r.due.IsZero() && at.Before(r.due) {
			n++
			e.t.Logf("%s due %s was handled by %s", r.id(), r.due.Format(time.StampMilli), at.Format(time.StampMilli))
		}
	}
	return n
}

// producedRecord is a record as the broker stored it.
type producedRecord struct {
	topic     string
	partition int
	offset    int64
	key       string
	due       time.Time // its handoff-deliver-at; zero for none
}

func (r producedRecord) id() string { return originID(r.topic, r.partition, r.offset) }

func countDelayed(rs []producedRecord) int {
	n := 0
	for _, r := range rs {
		if !r.due.IsZero() {
			n++
		}
	}
	return n
}

// produceMixed produces batches of size records, gap apart, until ctx
// ends, and returns them with their partitions and offsets. In turn an
// order (ordered class; 40 keys, each a run of its changes; every 150th
// is poison: a dead letter whose key parks the later ones), a user
// (unique key; every 200th is poison; every 12th has a handoff-deliver-at
// header 2 to 6s ahead) and a heartbeat (unique key).
func produceMixed(ctx context.Context, t *testing.T, addrs []string, size int, gap time.Duration) []producedRecord {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Errorf("producer: %v", err)
		return nil
	}
	defer cl.Close()
	var out []producedRecord
	for n := 0; ctx.Err() == nil; {
		var batch []*kgo.Record
		dues := map[*kgo.Record]time.Time{}
		for range size {
			var r *kgo.Record
			switch seq := n / 3; n % 3 {
			case 0:
				v := fmt.Sprintf(`{"seq":%d}`, seq)
				if seq%150 == 75 {
					v = fmt.Sprintf(`{"seq":%d,"poison":true}`, seq)
				}
				r = &kgo.Record{Topic: rental.TopicOrders, Key: fmt.Appendf(nil, "order-%d", seq%40), Value: []byte(v)}
			case 1:
				v := fmt.Sprintf(`{"seq":%d}`, seq)
				if seq%200 == 100 {
					v = fmt.Sprintf(`{"seq":%d,"poison":true}`, seq)
				}
				r = &kgo.Record{Topic: rental.TopicUsers, Key: fmt.Appendf(nil, "user-%d", seq), Value: []byte(v)}
				if seq%12 == 5 {
					due := time.Now().Add(2*time.Second + time.Duration(seq%5)*time.Second)
					r.Headers = []kgo.RecordHeader{{Key: runtime.HeaderDeliverAt, Value: []byte(due.Format(time.RFC3339Nano))}}
					dues[r] = due
				}
			case 2:
				r = &kgo.Record{Topic: rental.TopicHeartbeats, Key: fmt.Appendf(nil, "device-%d", seq), Value: []byte("beat")}
			}
			batch = append(batch, r)
			n++
		}
		// A batch begun is written whole, whatever ctx does.
		pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res := cl.ProduceSync(pctx, batch...)
		cancel()
		if err := res.FirstErr(); err != nil {
			t.Errorf("produce: %v", err)
			return out
		}
		for _, pr := range res {
			r := pr.Record
			out = append(out, producedRecord{topic: r.Topic, partition: int(r.Partition), offset: r.Offset, key: string(r.Key), due: dues[r]})
		}
		select {
		case <-ctx.Done():
		case <-time.After(gap):
		}
	}
	return out
}

// stoppedWell accepts a clean stop (exit 0) and one whose only fault is
// a final commit that failed while the group rebalanced (after a SIGKILL
// the group waits out the dead member's session, and a commit meanwhile
// may not finish in its 2s): Kafka delivers what was not committed
// again, duplicates and not losses, which the accounting counts.
func stoppedWell(t *testing.T, name string, code int, stderr string) bool {
	t.Helper()
	if code == 0 {
		return true
	}
	if code == 1 && strings.Contains(stderr, "final commit failed") && !strings.Contains(stderr, "snapshot failed") && !strings.Contains(stderr, "not written to the changelog") {
		t.Logf("%s: final commit failed during a rebalance (exit 1): its uncommitted messages come again", name)
		return true
	}
	return false
}

// explainInversions logs, for the first three per-key order inversions
// of topic in the effects file, the key, the offsets involved with their line
// numbers and when the tail first saw them, and what every pod's stderr
// says about that partition (its group events) and that key, so that a
// failure says which instances handled what around it.
func (d *deployment) explainInversions(topic string, began time.Time) {
	t := d.t
	b, err := os.ReadFile(d.effects)
	if err != nil {
		t.Errorf("explain inversions: %v", err)
		return
	}
	type seenAt struct {
		off  int64
		line int
	}
	maxOff := map[string]seenAt{}
	first := map[string]int{} // topic/partition/offset: first line
	lines := effectLines(b)
	explained := 0
	seenTime := func(id string) string {
		d.tail.mu.Lock()
		defer d.tail.mu.Unlock()
		if at, ok := d.tail.seen[id]; ok {
			return at.Sub(began).Round(time.Millisecond).String()
		}
		return "?"
	}
	for n, line := range lines {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != topic {
			continue
		}
		id := f[0] + "/" + f[1] + "/" + f[2]
		if _, ok := first[id]; ok {
			continue
		}
		first[id] = n + 1
		var off int64
		fmt.Sscan(f[2], &off)
		k := f[0] + "/" + f[3]
		m, ok := maxOff[k]
		if !ok || off > m.off {
			maxOff[k] = seenAt{off, n + 1}
			continue
		}
		if explained++; explained > 3 {
			continue // one record that ran early inverts every later one of its key: the first say it
		}
		var all []string
		for j, l := range lines {
			g := strings.Fields(l)
			if len(g) == 4 && g[0] == topic && g[3] == f[3] {
				all = append(all, fmt.Sprintf("#%d@%s", j+1, g[2]))
			}
		}
		t.Logf("inversion: %s key %s partition %s: offset %d first handled at line %d (seen %s), after offset %d at line %d (seen %s); the key's lines (line@offset): %s",
			topic, f[3], f[1], off, n+1, seenTime(id), m.off, m.line, seenTime(topic+"/"+f[1]+"/"+fmt.Sprint(m.off)), strings.Join(all, " "))
		part := topic + "/" + f[1]
		for _, p := range d.all {
			text := p.s.stderrText()
			evs, _ := parseGroupEvents(text)
			var hist []string
			for _, ev := range evs {
				if slices.Contains(ev.partitions, part) {
					what := "assigned"
					if ev.revoked {
						what = "revoked"
						if ev.lost {
							what = "lost"
						}
					}
					hist = append(hist, fmt.Sprintf("%s %s gen %d", ev.at.Sub(began).Round(time.Millisecond), what, ev.generation))
				}
			}
			var mention []string
			for l := range strings.Lines(text) {
				if strings.Contains(l, "partitions assigned") || strings.Contains(l, "partitions revoked") {
					continue
				}
				if strings.Contains(l, f[3]) || strings.Contains(l, topic+"/"+f[1]) || strings.Contains(l, "partition="+f[1]) {
					mention = append(mention, strings.TrimSpace(l))
				}
			}
			if len(hist) == 0 && len(mention) == 0 {
				continue // never had the partition
			}
			if len(mention) > 40 {
				mention = append(mention[:40], fmt.Sprintf("... %d more", len(mention)-40))
			}
			t.Logf("  %s: %s: %s\n    %s", p.name, part, strings.Join(hist, "; "), strings.Join(mention, "\n    "))
		}
	}
}
