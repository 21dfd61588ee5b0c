package testio

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// ClientEnv is the environment variable naming the Kafka client library
// the tests of a test binary run against: "kafka-go" or "franz-go" (the
// values of runtime.Client). Set, the binary runs its tests once, for
// that client. Unset, a TestMain using [BothClients] runs them for
// kafka-go and then again, in a copy of itself, for franz-go.
const ClientEnv = "HANDOFF_TEST_CLIENT"

// The two clients, as runtime.Client spells them (this package cannot
// import runtime: runtime's own tests use it).
const (
	KafkaGo = "kafka-go"
	FranzGo = "franz-go"
)

// Client returns the Kafka client this test binary runs against: the
// value of [ClientEnv], or kafka-go when it is unset. A value that is
// neither client ends the process with exit code 2 and a message naming
// the variable, so that a misspelled client does not quietly test
// kafka-go twice.
func Client() string {
	c := os.Getenv(ClientEnv)
	switch c {
	case "":
		return KafkaGo
	case KafkaGo, FranzGo:
		return c
	}
	fmt.Fprintf(os.Stderr, "%s=%q: want %s or %s\n", ClientEnv, c, KafkaGo, FranzGo)
	os.Exit(2)
	return ""
}

// TestingM is what [BothClients] wraps and returns: *testing.M, or a
// wrapper of it. goleak.VerifyTestMain takes the same shape.
type TestingM interface{ Run() int }

// BothClients returns m with a Run that runs the package's tests for
// every client: with [ClientEnv] set, for that client only (m.Run);
// unset, for kafka-go (m.Run) and for franz-go by running the test
// binary again (its own path and arguments, so -run, -v, -count, -json
// and the rest apply to both runs) with ClientEnv=franz-go. The franz-go
// run starts with the kafka-go one and runs beside it (most of the tests
// wait on brokers and timers, so two runs take little more than one);
// its output is kept in a temporary file and printed after the first
// run's. It runs after the first instead, its output streamed, for
// benchmarks, profiles, traces and -test.failfast, and with SerialEnv
// set. Run's exit code is non-zero when either run failed. Each run
// starts with a line "=== client NAME", so that a failure can be told to
// belong to its client.
//
// The second run is skipped when it could only repeat the first or
// would be wrong to repeat: -test.list, -test.fuzz, and -test.failfast
// after a failure. Run after the first, its -test.timeout is what is
// left of the first's (beside it, the first's own), and its profiles
// and coverage profile (-test.coverprofile, cpuprofile,
// memprofile, blockprofile, mutexprofile, trace) are written to the
// same names with ".franz-go" added, so the first run's are kept. Its
// test log (what the tests read, which go test's cache is keyed with) is
// added to the first's, with ClientEnv.
//
// Use it in TestMain, inside goleak's check if the package has one:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(testio.BothClients(m)) }
func BothClients(m TestingM) TestingM { return bothClients{m} }

type bothClients struct{ m TestingM }

func (b bothClients) Run() int {
	start := time.Now()
	client := Client()
	_, set := os.LookupEnv(ClientEnv)
	if set || skipSecond(0) {
		fmt.Printf("=== client %s\n", client)
		code := b.m.Run()
		appendTestLog(flagValue("test.testlogfile"), []byte("getenv "+ClientEnv+"\n"))
		return code
	}
	// The franz-go run starts now, beside this one, unless the runs
	// must not overlap; its output, kept in a file meanwhile, follows
	// this run's.
	serial := !concurrentOK()
	var second *exec.Cmd
	var out *os.File
	startSecond := func(took time.Duration) error {
		second = exec.Command(os.Args[0], secondRun(os.Args[1:], took)...)
		second.Env = append(os.Environ(), ClientEnv+"="+FranzGo)
		second.Stdin, second.Stdout, second.Stderr = os.Stdin, os.Stdout, os.Stderr
		if !serial {
			var err error
			if out, err = os.CreateTemp("", "handoff-test-"+FranzGo+"-*.out"); err != nil {
				return err
			}
			second.Stdout, second.Stderr = out, out
		}
		return second.Start()
	}
	var startErr error
	if !serial {
		startErr = startSecond(0)
	}
	fmt.Printf("=== client %s\n", KafkaGo)
	code := b.m.Run()
	// go test's cache must know that the runs depend on ClientEnv, which
	// was read before the test log was open (m.Run opens it).
	testLog := flagValue("test.testlogfile")
	appendTestLog(testLog, []byte("getenv "+ClientEnv+"\n"))
	if serial {
		if skipSecond(code) {
			return code
		}
		startErr = startSecond(time.Since(start))
	}
	first, secondResult := "ok", "ok"
	if code != 0 {
		first = "FAIL"
	}
	err := startErr
	if err == nil {
		err = second.Wait()
	}
	if out != nil {
		out.Seek(0, io.SeekStart)
		io.Copy(os.Stdout, out)
		out.Close()
		os.Remove(out.Name())
	}
	if err != nil {
		secondResult = "FAIL"
		if _, ok := err.(*exec.ExitError); !ok {
			secondResult = fmt.Sprintf("FAIL (could not run the test binary again: %v)", err)
		}
		code = max(code, 1)
	}
	if testLog != "" {
		// What the second run's tests read counts for the cache too.
		read, _ := os.ReadFile(testLog + "." + FranzGo)
		appendTestLog(testLog, bytes.TrimPrefix(read, []byte(testLogMagic)))
		os.Remove(testLog + "." + FranzGo)
	}
	if code != 0 {
		// The first run's FAIL line is far above the second run's
		// output: say which client failed.
		fmt.Printf("=== clients: %s %s, %s %s\n", KafkaGo, first, FranzGo, secondResult)
	}
	return code
}

// SerialEnv, set to any value, makes [BothClients] run the franz-go run
// after the kafka-go one instead of beside it.
const SerialEnv = "HANDOFF_TEST_SERIAL"

// concurrentOK reports whether the two runs may overlap: not for
// benchmarks (each would slow the other's figures), -test.failfast (the
// second run is skipped after a failure of the first), profiles and
// traces (they would measure both), nor with SerialEnv set.
func concurrentOK() bool {
	if _, set := os.LookupEnv(SerialEnv); set {
		return false
	}
	for _, name := range []string{"test.bench", "test.failfast", "test.cpuprofile", "test.memprofile", "test.blockprofile", "test.mutexprofile", "test.trace"} {
		if v := flagValue(name); v != "" && v != "false" {
			return false
		}
	}
	return true
}

// testLogMagic starts the test log, the list of the environment
// variables and files the tests read, that go test keys its cache with
// (-test.testlogfile; the format is cmd/go's and testing's).
const testLogMagic = "# test log\n"

// appendTestLog adds lines (each ending in a newline) to the test log at
// path, if there is one.
func appendTestLog(path string, lines []byte) {
	if path == "" || len(lines) == 0 {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return // no log (not run by go test): nothing to tell
	}
	defer f.Close()
	f.Write(lines)
}

// flagValue returns the value of the test binary's flag name, "" if it
// has none.
func flagValue(name string) string {
	if f := flag.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// skipSecond says whether the flags make a second run pointless: a
// listing or a fuzzing run, or -failfast after a failure.
func skipSecond(code int) bool {
	on := func(name string) bool {
		v := flagValue(name)
		return v != "" && v != "false"
	}
	return on("test.list") || on("test.fuzz") || code != 0 && on("test.failfast")
}

// outputFlags are the flags naming files a run writes; the second run
// writes them with a suffix.
var outputFlags = []string{"coverprofile", "cpuprofile", "memprofile", "blockprofile", "mutexprofile", "trace", "testlogfile"}

// secondRun returns the first run's arguments for the second: the
// timeout reduced by the time the first run took, output files renamed.
func secondRun(args []string, took time.Duration) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		name, value, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case !ok:
		case name == "test.timeout":
			if d, err := time.ParseDuration(value); err == nil && d > 0 {
				a = "-test.timeout=" + max(d-took, time.Second).String()
			}
		case strings.HasPrefix(name, "test.") && slices.Contains(outputFlags, strings.TrimPrefix(name, "test.")) && value != "":
			a = "-" + name + "=" + value + "." + FranzGo
		}
		out = append(out, a)
	}
	return out
}
