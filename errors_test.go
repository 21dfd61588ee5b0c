package handoff_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/handoff-go/handoff"
)

func TestUnavailable(t *testing.T) {
	base := errors.New("connection refused")
	u := handoff.Unavailable(base)
	if !handoff.IsUnavailable(u) || !handoff.IsUnavailable(fmt.Errorf("save order: %w", u)) || !errors.Is(u, base) {
		t.Errorf("Unavailable(%v) not recognised through wrapping, or does not unwrap", base)
	}
	if u.Error() != "unavailable: connection refused" || handoff.Unavailable(nil).Error() != "unavailable" {
		t.Errorf("texts %q, %q", u, handoff.Unavailable(nil))
	}
	if handoff.IsUnavailable(base) || handoff.IsUnavailable(nil) {
		t.Error("a plain error is unavailable")
	}
	// Permanent wins: the message is bad whatever the dependency's state.
	if handoff.IsUnavailable(handoff.Unavailable(handoff.Permanent(base))) || handoff.IsUnavailable(handoff.Permanent(u)) {
		t.Error("a permanent error inside or around Unavailable counts as unavailable")
	}
}
