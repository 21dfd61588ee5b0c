package ledger_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"go.uber.org/goleak"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/examples/ledger"
	"github.com/handoff-go/handoff/handofftest"
)

// flakyReceipts fails the first attempt of every fifth charge.
type flakyReceipts struct {
	mu   sync.Mutex
	seen map[string]int
}

func (r *flakyReceipts) Send(ctx context.Context, id, account string, amount int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen[id]++
	var n int
	fmt.Sscanf(id, "charge-%d", &n)
	if n%5 == 0 && r.seen[id] == 1 {
		return ledger.ErrReceiptBusy
	}
	return nil
}

// checkChargedOnce is the user's test of the charges handler: 100
// charges of 10 on 4 accounts, with the receipt service failing the
// first attempt of every fifth charge (the runtime retries them, with the
// class's own backoff, on the bubble's clock), and ten charges delivered
// a second time as Kafka does after a crash. Every charge must be handled
// and every account debited exactly once per charge.
func checkChargedOnce(t testing.TB, handler func(*ledger.Charger) handoff.HandlerFunc) {
	l := ledger.NewLedger()
	c := &ledger.Charger{Ledger: l, Receipts: &flakyReceipts{seen: map[string]int{}}}
	h := handofftest.New(t, ledger.Class(handler(c)))
	for i := range 100 {
		h.Send(&handoff.Message{ID: fmt.Sprintf("charge-%d", i), Value: fmt.Appendf(nil, "acct-%d 10", i%4)})
	}
	h.Wait()
	for i := range 100 {
		want := 1
		if i%5 == 0 {
			want = 2 // the receipt failed once
		}
		h.RequireHandled(fmt.Sprintf("charge-%d", i), want)
	}
	for i := range 10 {
		h.Redeliver(fmt.Sprintf("charge-%d", 7*i))
	}
	h.Wait()
	for a := range 4 {
		acct := fmt.Sprintf("acct-%d", a)
		if got := l.Balance(acct); got != -250 {
			t.Errorf("%s: balance %d after 25 charges of 10, want -250", acct, got)
		}
	}
}

func fixed(c *ledger.Charger) handoff.HandlerFunc { return c.Handle }
func buggy(c *ledger.Charger) handoff.HandlerFunc { return c.HandleBuggy }

// TestChargedOnce runs the user's test on the handler the service uses.
// LEDGER_HANDLER=buggy runs it on the buggy one instead, to see it fail.
func TestChargedOnce(t *testing.T) {
	handler := fixed
	if os.Getenv("LEDGER_HANDLER") == "buggy" {
		handler = buggy
	}
	synctest.Test(t, func(t *testing.T) { checkChargedOnce(t, handler) })
}

// TestChargedOnceCatchesBuggyHandler runs the user's test on the buggy
// handler and checks that it fails, naming the double debits.
func TestChargedOnceCatchesBuggyHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{TB: t}
		done := make(chan struct{})
		go func() { // a Fatal ends this goroutine, not the test
			defer close(done)
			checkChargedOnce(rec, buggy)
		}()
		<-done
		if len(rec.errs) == 0 {
			t.Fatal("the test passed on the handler that debits twice")
		}
		report := strings.Join(rec.errs, "\n")
		if !strings.Contains(report, "want -250") {
			t.Errorf("the test failed, but not on the balances:\n%s", report)
		}
		t.Logf("the user's test caught the buggy handler:\n%s", report)
	})
}

// recorder is a testing.TB that keeps failures instead of failing the
// test, for a test of a test.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }
func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }
func (r *recorder) Fail()             { r.Errorf("failed") }
func (r *recorder) FailNow()          { r.Fatalf("failed") }
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errs) > 0
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
