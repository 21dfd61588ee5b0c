package kclient

import (
	"math/bits"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// recordSlices is the consumer client's kgo.PoolRecords: the slices of
// kgo.Record that franz-go decodes a record batch into come from it, and
// a batch's slice comes back to it once franzQueue.Next has handed on
// the batch's last record (kgo.Record.Recycle). Without it, every batch
// is a new slice of about 160 bytes a record: at a few partitions, large
// batches are large allocations, zeroed each time and returned to the
// system between collections.
//
// The slices are kept by capacity, in powers of two from
// minPooledRecords to maxPooledRecords records, in sync.Pools, so that
// the collector frees what an idle client no longer needs. A batch of
// more records than maxPooledRecords gets a slice of its own, as
// without the pool. A record that Next never hands on (its partition
// was revoked, or the client closed) is never recycled, and neither is
// its batch's slice: the collector takes it.
type recordSlices struct {
	classes [maxRecordClass - minRecordClass + 1]sync.Pool // of *[]kgo.Record
	boxes   sync.Pool                                      // empty *[]kgo.Record, so that a put allocates nothing
}

const (
	minRecordClass   = 4  // 16 records
	maxRecordClass   = 13 // 8192 records: 1.3 MB of kgo.Record
	minPooledRecords = 1 << minRecordClass
	maxPooledRecords = 1 << maxRecordClass
)

var _ kgo.PoolRecords = (*recordSlices)(nil)

// GetRecords returns an empty slice with room for n records: its
// capacity is the least power of two of at least n and
// minPooledRecords. It returns nil for n < 1 or n > maxPooledRecords;
// franz-go allocates the slice then.
func (p *recordSlices) GetRecords(n int) []kgo.Record {
	if n < 1 || n > maxPooledRecords {
		return nil
	}
	c := classOf(n)
	if box, _ := p.classes[c].Get().(*[]kgo.Record); box != nil {
		s := (*box)[:0]
		*box = nil
		p.boxes.Put(box)
		return s
	}
	return make([]kgo.Record, 0, 1<<(c+minRecordClass))
}

// classOf returns the index in classes of the slices with room for n
// records (1 <= n <= maxPooledRecords): those of the least power of two
// capacity of at least n and minPooledRecords.
func classOf(n int) int {
	return max(bits.Len(uint(n-1)), minRecordClass) - minRecordClass
}

// PutRecords keeps s for a later GetRecords. franz-go puts a slice back
// once each of its records was recycled, which zeroes the record. A
// slice whose capacity is not one GetRecords gives is dropped.
func (p *recordSlices) PutRecords(s []kgo.Record) {
	n := cap(s)
	if n < minPooledRecords || n > maxPooledRecords || n&(n-1) != 0 {
		return
	}
	box, _ := p.boxes.Get().(*[]kgo.Record)
	if box == nil {
		box = new([]kgo.Record)
	}
	*box = s[:0]
	p.classes[classOf(n)].Put(box)
}
