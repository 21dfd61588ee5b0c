package changelog

import (
	"fmt"
	"maps"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestEnds: Ends answers the end offset of every asked partition, on
// each of three brokers' leaders, with one request per leader; an empty
// partition ends at 0, and one the topic does not have is an error
// naming it, with the others' ends still answered.
func TestEnds(t *testing.T) {
	t.Parallel()
	c := cluster(t, kfake.NumBrokers(3))
	cl := newClient(t, c, nil)
	ctx := timeout(t)
	if err := cl.Ensure(ctx, map[string]int32{"orders": 6}); err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	var outs []*Out
	for p := range int32(6) {
		want[p] = int64(p) // partition p gets p records
		for i := range p {
			outs = append(outs, &Out{Input: "orders", Partition: p, Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")})
		}
	}
	if err := cl.Send(outs)(ctx); err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	c.ControlKey(kmsg.ListOffsets.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		asked.Add(1)
		return nil, nil, false
	})
	got, err := cl.Ends(ctx, "orders", []int32{0, 1, 2, 3, 4, 5})
	if err != nil {
		t.Fatal(err)
	}
	if n := asked.Load(); n < 1 || n > 3 {
		t.Errorf("Ends of 6 partitions on 3 brokers sent %d ListOffsets requests, want one per leader (1 to 3)", n)
	}
	if !maps.Equal(got, want) {
		t.Errorf("Ends = %v, want %v", got, want)
	}
	got, err = cl.Ends(ctx, "orders", []int32{2, 9})
	if err == nil {
		t.Fatal("Ends of a partition the topic does not have: no error")
	}
	if got[2] != 2 || len(got) != 1 {
		t.Errorf("Ends with one partition missing = %v, want map[2:2]", got)
	}
	t.Log(err)
}

// TestMetaEnd: the meta topic's end offset, one request, after each
// write.
func TestMetaEnd(t *testing.T) {
	t.Parallel()
	cl, ctx := metaClient(t)
	for i := range int64(3) {
		end, err := cl.MetaEnd(ctx)
		if err != nil || end != i {
			t.Fatalf("MetaEnd after %d writes = %d, %v", i, end, err)
		}
		if _, err := cl.WriteMeta(ctx, []byte("k"), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
}
