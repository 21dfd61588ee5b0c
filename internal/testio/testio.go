// Package testio holds I/O helpers the project's tests share.
package testio

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer that a test may read while a process, a
// logger or a command writes to it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
