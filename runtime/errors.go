package runtime

import (
	"errors"
	"strings"
)

// Errors returned by the runtime. Match them with [errors.Is]; the
// returned errors wrap them with what was being done.
var (
	// ErrConfig is wrapped by every error [New] returns for a bad Config.
	ErrConfig = errors.New("runtime: invalid config")
	// ErrNotRunning is returned by [Runtime.Submit], [Runtime.Schedule],
	// [Runtime.Requeue] and the state-file methods before [Runtime.Run]
	// has started, and then once the stop has begun (Submit, Requeue),
	// once the stop's snapshot has begun (Schedule, which saves its
	// message during the stop until then) or once the state file is
	// closed (the others). A handler that fails with it during the stop
	// is not counted as failing (see [OutcomeInterrupted]).
	ErrNotRunning = errors.New("runtime: not running")
	// ErrRunTwice is returned by a second call of [Runtime.Run]: a stopped
	// runtime is not reused.
	ErrRunTwice = errors.New("runtime: Run called twice")
	// ErrUnknownClass is returned by [Runtime.Submit] and
	// [Runtime.Schedule] for a class that is not configured, and by
	// [Runtime.Requeue] for a dead letter whose class is gone.
	ErrUnknownClass = errors.New("runtime: unknown class")
	// ErrCommit is wrapped by the error [Runtime.Run] returns when the
	// stop's final offset commit failed. Nothing is lost: Kafka delivers
	// the uncommitted messages again, some of which were already handled
	// or saved.
	ErrCommit = errors.New("runtime: final commit failed")
	// ErrOtherGroup is returned by [Runtime.Run] when the state file was
	// written by an instance of another consumer group: its saved
	// messages belong to that group's partitions. The error names the
	// file and both groups.
	ErrOtherGroup = errors.New("runtime: state file belongs to another consumer group")
	// ErrStart is matched (with [errors.Is]) by the error [Runtime.Run]
	// returns when its start failed, before anything was fetched: the
	// state file could not be opened (locked by another process, corrupt,
	// unwritable) or belongs to another group ([ErrOtherGroup]), the
	// brokers refused the connection, a class has none of its topics, or
	// the recovery failed. Nothing is lost. The error reads as the
	// failure's own; a deploy tells a start that failed from a stop that
	// was not clean by it.
	ErrStart = errors.New("runtime: start failed")
	// ErrStopping is the cause of the handler contexts cancelled by the
	// hard stop: context.Cause(ctx) returns it.
	ErrStopping = errors.New("runtime: stopping")
	// ErrHandlerTimeout is the cause of a handler context whose class
	// Timeout ran out. The handler has failed recoverably.
	ErrHandlerTimeout = errors.New("runtime: handler timeout")
	// ErrNotFound is returned for a dead letter that does not exist.
	ErrNotFound = errors.New("runtime: not found")
	// ErrRequeued is returned by [Runtime.Requeue] and [Runtime.Discard]
	// for a dead letter that was requeued and is not finished yet, or
	// whose discard is being written.
	ErrRequeued = errors.New("runtime: dead letter already requeued")
	// ErrNoTopic is wrapped by the [TopicError] [Runtime.Run] returns
	// when none of a class's topics exists at start.
	ErrNoTopic = errors.New("runtime: no topic of the class exists")
	// ErrBadCursor is returned by the paging methods for a cursor they
	// did not make.
	ErrBadCursor = errors.New("runtime: bad cursor")
)

// Errors that stay inside the package.
var (
	// errGenerationEnded is returned by the final commit when a
	// rebalance ended the generation it would commit through.
	errGenerationEnded = errors.New("runtime: consumer group generation ended before the final commit")
	// errDiverted is what the handler wrapper returns for a message it
	// did not run but saved elsewhere (parked, or delayed by its header):
	// the message is settled already and neither succeeded nor failed.
	errDiverted = errors.New("runtime: message diverted")
	// errDuplicateDelayed is returned when a message to delay has the ID
	// of one already waiting, which would drop it.
	errDuplicateDelayed = errors.New("runtime: a delayed message with this ID is already waiting")
	// errDrainTimeout is the cause of the drain's context at DrainTimeout.
	errDrainTimeout = errors.New("runtime: drain timeout")
)

// startError is the error of a failed start: it matches [ErrStart] and
// reads, and unwraps, as its cause, on one line (errors.Join puts a
// newline between joined errors, which a log line would show as "\n").
type startError struct{ err error }

func (e startError) Error() string        { return strings.ReplaceAll(e.err.Error(), "\n", "; ") }
func (e startError) Unwrap() error        { return e.err }
func (e startError) Is(target error) bool { return target == ErrStart }
