package runtime

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKeyPartitionAsKafka checks keyPartition against franz-go's
// implementation of Kafka's default partitioner for keyed records.
func TestKeyPartitionAsKafka(t *testing.T) {
	part := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for _, n := range []int32{1, 3, 12, 100} {
		for i := range 2000 {
			key := []byte(fmt.Sprintf("key-%d", i))
			if i%7 == 0 {
				key = key[:i%5] // short tails: 0 to 4 bytes
			}
			if len(key) == 0 {
				continue // kgo's sticky partitioner does not hash empty keys
			}
			want := int32(part.Partition(&kgo.Record{Key: key}, int(n)))
			if got := keyPartition(key, n); got != want {
				t.Fatalf("keyPartition(%q, %d) = %d, Kafka's partitioner says %d", key, n, got, want)
			}
		}
	}
}
