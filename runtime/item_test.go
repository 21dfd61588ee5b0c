package runtime

import (
	"fmt"
	"strings"
	"testing"
)

// TestKafkaIDs checks IDs carved from shared blocks: each is
// "topic/partition/offset", across block boundaries, and stays unchanged
// while later IDs are made.
func TestKafkaIDs(t *testing.T) {
	t.Parallel()
	for _, topic := range []string{"orders", strings.Repeat("t", 2*idBlockSize)} {
		ids := newKafkaIDs(topic, 7)
		var made []string
		for i := range 500 {
			off := int64(i) * 1_000_003
			if i == 499 {
				off = 1<<63 - 1
			}
			made = append(made, ids.id(off))
		}
		for i, id := range made {
			off := int64(i) * 1_000_003
			if i == 499 {
				off = 1<<63 - 1
			}
			if want := fmt.Sprintf("%s/7/%d", topic, off); id != want {
				t.Fatalf("topic of %d bytes: ID %d is %q, want %q", len(topic), i, id, want)
			}
		}
	}
}

func BenchmarkKafkaIDs(b *testing.B) {
	ids := newKafkaIDs("orders", 3)
	b.ReportAllocs()
	var off int64
	for b.Loop() {
		_ = ids.id(off)
		off++
	}
}
