package devbroker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/handoff-go/handoff/internal/testio"
)

// TestDepartedStaticConsumerExpires: a static member of a
// consumer-protocol (KIP-848) group leaves with epoch -2 (its client
// closes) and does not come back. Once the broker's session timeout has
// passed, the other member gets its partitions, as Kafka gives them.
// Before, kfake kept the departed member, and its partitions, for good:
// the other member never got them.
func TestDepartedStaticConsumerExpires(t *testing.T) {
	t.Parallel()
	const session = time.Second
	b, err := Start(Config{Topics: []string{"t"}, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	testio.SetConsumerGroupTimers(t, b.Addrs(), session, 100*time.Millisecond)

	member := func(instance string) (*kgo.Client, func() int) {
		var mu sync.Mutex
		owned := map[int32]bool{}
		opts := []kgo.Opt{kgo.SeedBrokers(b.Addrs()...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
			kgo.ServerSideBalancer(), kgo.DisableAutoCommit(), kgo.DisableClientMetrics(),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
				mu.Lock()
				for _, p := range ps["t"] {
					owned[p] = true
				}
				mu.Unlock()
			}),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
				mu.Lock()
				for _, p := range ps["t"] {
					delete(owned, p)
				}
				mu.Unlock()
			}),
		}
		if instance != "" {
			opts = append(opts, kgo.InstanceID(instance))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				if fs := cl.PollFetches(context.Background()); fs.IsClientClosed() {
					return
				}
			}
		}()
		return cl, func() int { mu.Lock(); defer mu.Unlock(); return len(owned) }
	}
	waitOwns := func(what string, owns func() int, n int, within time.Duration) time.Duration {
		t.Helper()
		began := time.Now()
		for owns() != n {
			if time.Since(began) > within {
				t.Fatalf("%s: owns %d partitions after %s, want %d", what, owns(), within, n)
			}
			time.Sleep(20 * time.Millisecond) // the poll interval, not a wait for an event
		}
		return time.Since(began)
	}

	a, ownsA := member("a")
	waitOwns("a alone", ownsA, 2, 10*time.Second)
	c, ownsC := member("")
	defer c.Close()
	waitOwns("a and c", ownsC, 1, 10*time.Second)
	a.Close() // a static leave: epoch -2
	took := waitOwns("c after a left", ownsC, 2, session+5*time.Second)
	if took < session/2 {
		t.Errorf("c got a's partition %s after a left, before a's session timeout (%s)", took, session)
	}
	t.Logf("c got the departed static member's partition %s after it left (session timeout %s)", took.Round(10*time.Millisecond), session)
}
