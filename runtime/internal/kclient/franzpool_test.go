package kclient

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/handoff-go/handoff/internal/testio"
)

// TestRecordSlicesSizes: GetRecords gives an empty slice of the least
// power of two of room (at least minPooledRecords), nil where franz-go is
// to allocate, and a slice put back comes out of the class of its
// capacity, never one too small.
func TestRecordSlicesSizes(t *testing.T) {
	var p recordSlices
	for _, n := range []int{-1, 0, maxPooledRecords + 1, 1 << 20} {
		if s := p.GetRecords(n); s != nil {
			t.Errorf("GetRecords(%d) = a slice of capacity %d, want nil", n, cap(s))
		}
	}
	var ns []int // every count up to two classes, then each class's edges
	for n := 1; n <= 2*minPooledRecords; n++ {
		ns = append(ns, n)
	}
	for c := minRecordClass + 2; c <= maxRecordClass; c++ {
		ns = append(ns, 1<<(c-1)+1, 1<<c-1, 1<<c)
	}
	for _, n := range ns {
		s := p.GetRecords(n)
		want := minPooledRecords
		for want < n {
			want *= 2
		}
		if len(s) != 0 || cap(s) != want {
			t.Fatalf("GetRecords(%d): len %d, cap %d; want 0 and %d", n, len(s), cap(s), want)
		}
		p.PutRecords(s[:n])
	}
	// Slices no GetRecords gives are dropped, not handed out as another
	// class's.
	p.PutRecords(make([]kgo.Record, 0, 24))
	p.PutRecords(make([]kgo.Record, 0, 8))
	p.PutRecords(make([]kgo.Record, 0, 2*maxPooledRecords))
	for _, n := range ns {
		if s := p.GetRecords(n); cap(s) < n || len(s) != 0 {
			t.Fatalf("GetRecords(%d) after puts: len %d, cap %d", n, len(s), cap(s))
		}
	}
}

// TestRecordSlicesPutAllocatesNothing: putting a slice back and getting
// it again costs no allocation once the pool has its box (a sync.Pool
// drops items at random under the race detector, so only without it).
func TestRecordSlicesPutAllocatesNothing(t *testing.T) {
	if testio.RaceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	var p recordSlices
	s := p.GetRecords(100)
	p.PutRecords(s)
	if a := testing.AllocsPerRun(1000, func() { p.PutRecords(p.GetRecords(100)) }); a > 0.01 {
		t.Errorf("%.2f allocations a get and put, want 0", a)
	}
}
