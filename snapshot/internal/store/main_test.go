package store

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a test leaves a goroutine behind. Nothing is
// ignored: bbolt starts no goroutine of its own except Batch's, which ends
// with the batch.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
