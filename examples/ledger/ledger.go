// Package ledger is a small payments consumer whose tests use
// handofftest to find a real bug: a handler that is not idempotent under
// redelivery. Each "charges" message debits an account and then sends a
// receipt through a service that sometimes fails. The runtime retries a
// failed message, and Kafka redelivers a message whose offset was not
// committed before a crash, so a handler may see the same message more
// than once:
//
//   - [Charger.HandleBuggy] debits, then sends the receipt. When the
//     receipt fails, the runtime retries the message and the account is
//     debited again.
//   - [Charger.Handle] is the fix: the debit is keyed by the message's ID,
//     which is the same on every attempt and every redelivery, and
//     applied at most once (a real database would insert the ID into a
//     table of applied charges in the debit's transaction).
//
// ledger_test.go holds the user's test, which passes with Handle and
// fails with HandleBuggy (a second test checks that it does).
package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/runtime"
)

// Ledger is the accounts store; it stands in for the database.
type Ledger struct {
	mu       sync.Mutex
	balances map[string]int64
	applied  map[string]bool // charge IDs applied, for Charger.Handle
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{balances: map[string]int64{}, applied: map[string]bool{}}
}

// Debit takes amount from account.
func (l *Ledger) Debit(account string, amount int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.balances[account] -= amount
}

// DebitOnce takes amount from account unless the charge id was applied
// already, and reports whether it was applied now.
func (l *Ledger) DebitOnce(id, account string, amount int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.applied[id] {
		return false
	}
	l.applied[id] = true
	l.balances[account] -= amount
	return true
}

// Balance returns account's balance.
func (l *Ledger) Balance(account string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.balances[account]
}

// Receipts sends payment receipts; Send may fail, and is retried.
type Receipts interface {
	Send(ctx context.Context, chargeID, account string, amount int64) error
}

// Charger handles the charges class.
type Charger struct {
	Ledger   *Ledger
	Receipts Receipts
}

// ParseCharge reads a charge value, "<account> <amount>".
func ParseCharge(v []byte) (account string, amount int64, err error) {
	account, num, ok := strings.Cut(string(v), " ")
	if ok {
		amount, err = strconv.ParseInt(num, 10, 64)
	}
	if !ok || err != nil || account == "" || amount <= 0 {
		return "", 0, fmt.Errorf("ledger: bad charge %q", v)
	}
	return account, amount, nil
}

// HandleBuggy debits the account and sends the receipt. It is not
// idempotent: a retry after a failed receipt debits again.
func (c *Charger) HandleBuggy(ctx context.Context, m *handoff.Message) error {
	account, amount, err := ParseCharge(m.Value)
	if err != nil {
		return handoff.Permanent(err)
	}
	c.Ledger.Debit(account, amount)
	return c.Receipts.Send(ctx, m.ID, account, amount)
}

// Handle debits the account once per charge, whatever the number of
// attempts and deliveries, and sends the receipt (which may be sent more
// than once: receipts carry the charge ID, so the customer's inbox
// deduplicates them).
func (c *Charger) Handle(ctx context.Context, m *handoff.Message) error {
	account, amount, err := ParseCharge(m.Value)
	if err != nil {
		return handoff.Permanent(err)
	}
	c.Ledger.DebitOnce(m.ID, account, amount)
	return c.Receipts.Send(ctx, m.ID, account, amount)
}

// ErrReceiptBusy is the receipt service's transient failure.
var ErrReceiptBusy = errors.New("ledger: receipt service busy")

// Class is the charges class as the service configures it, running
// handler: the policy the test exercises is the production one.
func Class(handler handoff.HandlerFunc) runtime.Class {
	return runtime.Class{
		Name:    "charges",
		Topics:  []string{"charges"},
		Handler: handler,
		Workers: 4,
		Retry:   runtime.RetryPolicy{MaxAttempts: 5},
	}
}
