package admin

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/handoff-go/handoff/runtime"
)

// TestDeadLetterOwnerErrors: a dead letter another instance owns is a
// 409 naming the owner in the API and a flash naming it on the
// dashboard; a bad key is a 400; what a flash repeats from its query is
// checked (no markup, no control characters, bounded).
func TestDeadLetterOwnerErrors(t *testing.T) {
	t.Parallel()
	notOwner := fmt.Errorf("wrapped: %w", &runtime.NotOwnerError{Key: "3f2a9c01d4e5b6a7-12", Topic: "orders", Partition: 3, Owner: "rental-1"})
	for _, tc := range []struct {
		err  error
		want int
	}{
		{notOwner, http.StatusConflict},
		{fmt.Errorf("%w: 12", runtime.ErrBadKey), http.StatusBadRequest},
		{fmt.Errorf("%w: x", runtime.ErrNotFound), http.StatusNotFound},
	} {
		if got := statusOf(tc.err); got != tc.want {
			t.Errorf("statusOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	if !strings.Contains(notOwner.Error(), "owned by instance rental-1") || !strings.Contains(notOwner.Error(), "topic orders partition 3") {
		t.Errorf("the refusal does not name the owner and partition: %v", notOwner)
	}

	text, isErr := flash(url.Values{"msg": {"not-owner"}, "key": {"3f2a9c01d4e5b6a7-12"}, "owner": {"rental-1\x1b[2J"}})
	if !isErr || !strings.Contains(text, "Dead letter 3f2a9c01d4e5b6a7-12 belongs to a partition another instance owns") ||
		!strings.Contains(text, "owned by rental-1[2J.") {
		t.Errorf("not-owner flash: %q (error %v)", text, isErr)
	}
	if text, _ := flash(url.Values{"msg": {"discarded"}, "key": {"<b>x</b>"}}); text != "Dead letter ? discarded." {
		t.Errorf("a key that is not an ID is not repeated: %q", text)
	}
	if text, _ := flash(url.Values{"msg": {"not-owner"}, "key": {"1"}, "owner": {strings.Repeat("é", 500)}}); len([]rune(text)) > 250 {
		t.Errorf("a long owner is not cut: %d runes", len([]rune(text)))
	}
}
