package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/handoff-go/handoff/devbroker"
)

// brokerEnv, when set in the environment, turns this binary into the
// broker process: "PARTITIONS:topic,topic,...". The parent re-executes its
// own binary with it, so the broker's CPU, allocations and memory stay out
// of the measured process.
const brokerEnv = "HANDOFF_BENCH_BROKER"

// brokerChild runs the embedded broker until its stdin closes (the parent
// closed it, or died), printing "ADDR host:port" once it listens.
// It returns the process exit code.
func brokerChild(spec string) int {
	ps, list, ok := strings.Cut(spec, ":")
	partitions, err := strconv.Atoi(ps)
	if !ok || err != nil {
		fmt.Fprintf(os.Stderr, "bench broker: bad %s=%q\n", brokerEnv, spec)
		return 2
	}
	b, err := devbroker.Start(devbroker.Config{Topics: strings.Split(list, ","), Partitions: partitions})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench broker:", err)
		return 1
	}
	defer b.Close()
	fmt.Printf("ADDR %s\n", b.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin) // returns at EOF
	return 0
}

// broker is the broker process seen from the measuring process.
type broker struct {
	addr       string
	topics     []string
	partitions int // per topic
	pid        int // the broker process; 0 when not known here
	cmd        *exec.Cmd
	stdin      io.WriteCloser
}

// startBroker re-executes this binary as a broker process with topics of
// partitions partitions each, and waits until it listens.
func startBroker(topics []string, partitions int) (*broker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench: find own binary: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d:%s", brokerEnv, partitions, strings.Join(topics, ",")))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start broker process: %w", err)
	}
	b := &broker{topics: slices.Clone(topics), partitions: partitions, pid: cmd.Process.Pid, cmd: cmd, stdin: stdin}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ADDR ")
	if err != nil || !ok {
		b.close()
		return nil, fmt.Errorf("bench: broker process did not report its address (%q): %v", line, err)
	}
	b.addr = addr
	return b, nil
}

// close ends the broker process: stdin EOF asks it to stop; after 5s it
// is killed. It waits for the process either way.
func (b *broker) close() {
	_ = b.stdin.Close()
	done := make(chan struct{})
	go func() {
		_ = b.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-done
	}
}

// produce writes n records of valueSize bytes, round-robin over topics, keyed so the hash balancer spreads them over the
// partitions. Records are built a chunk at a time to keep the measuring
// process's heap small.
func (b *broker) produce(ctx context.Context, topics []string, n, valueSize int) error {
	w := devbroker.NewWriter([]string{b.addr})
	defer devbroker.CloseWriter(w)
	value := make([]byte, valueSize)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	const chunk = 5000
	msgs := make([]kafka.Message, 0, chunk)
	for i := range n {
		msgs = append(msgs, kafka.Message{
			Topic: topics[i%len(topics)],
			Key:   strconv.AppendInt([]byte("key-"), int64(i), 10),
			Value: value,
		})
		if len(msgs) == chunk || i == n-1 {
			if err := w.WriteMessages(ctx, msgs...); err != nil {
				return fmt.Errorf("bench: produce: %w", err)
			}
			msgs = msgs[:0]
		}
	}
	return nil
}

// waitCommitted polls every 10ms until group's committed offsets over
// topics sum to n, and returns when it saw that.
func (b *broker) waitCommitted(ctx context.Context, group string, topics []string, n int) (time.Time, error) {
	offsets := devbroker.NewOffsets([]string{b.addr})
	defer offsets.Close()
	tp := map[string]int{}
	for _, t := range topics {
		tp[t] = b.partitions
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		off, err := offsets.Committed(ctx, group, tp)
		if err != nil {
			return time.Time{}, fmt.Errorf("bench: %w", err)
		}
		sum := devbroker.Sum(off)
		if sum == int64(n) {
			return time.Now(), nil
		}
		if sum > int64(n) {
			return time.Time{}, fmt.Errorf("bench: group %q committed %d, more than the %d produced", group, sum, n)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("bench: group %q committed %d of %d: %w", group, sum, n, ctx.Err())
		}
	}
}
