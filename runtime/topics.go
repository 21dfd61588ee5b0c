package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The topic check of the start: every configured topic must exist before
// the runtime is ready. kafka-go's consumer group joins without a topic
// that does not exist (its partitions are simply not assigned) and says
// nothing, so the start asks the brokers itself, through the configured
// client.

// TopicError is returned by [Runtime.Run] when none of a class's topics
// exists and the class does not wait for them ([Class.WaitForTopics]). It
// wraps [ErrNoTopic].
type TopicError struct {
	Class  string
	Topics []string // the class's topics, none of which exists
}

func (e *TopicError) Error() string {
	return fmt.Sprintf("%v: class %q: none of its topics exists: %s", ErrNoTopic, e.Class, strings.Join(e.Topics, ", "))
}

func (e *TopicError) Unwrap() error { return ErrNoTopic }

// Bounds of the waits between topic checks: from the first, doubling, to
// the second.
const (
	topicWaitMin = 500 * time.Millisecond
	topicWaitMax = 30 * time.Second
)

// checkTopics asks the brokers which configured topics exist, until they
// answer or ctx ends. A missing topic of a class that waits for its
// topics is asked about again, with backoff, until it exists or ctx
// ends. Any other missing topic is logged at Warn, naming it, and the
// runtime runs without it and is not ready; a class with none of its
// topics makes it return a *TopicError. It returns the topics that exist,
// the ones to join the group with (Start joins them): kafka-go's group leader assigns no
// partition at all, of any topic, when one of the topics it is given does
// not exist.
func (k *consumer) checkTopics(ctx context.Context) ([]string, error) {
	wait := topicWaitMin
	pause := func() bool {
		if !sleep(ctx, wait) {
			return false
		}
		wait = min(2*wait, topicWaitMax)
		return true
	}
	for {
		missing, err := k.missingTopics(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil
			}
			k.cfg.logs.warn(k.cfg.log, "topics not checked", "brokers did not answer; topics not checked yet, not ready",
				"brokers", k.cfg.kafka.Brokers, "err", err, "retry_in", wait)
			if !pause() {
				return nil, nil
			}
			continue
		}
		var waitFor []string
		for _, c := range k.cfg.classes {
			gone := slices.DeleteFunc(slices.Clone(c.Topics), func(t string) bool { return !missing[t] })
			if len(gone) > 0 && c.WaitForTopics {
				waitFor = append(waitFor, gone...)
			}
		}
		if len(waitFor) == 0 {
			return k.judgeTopics(missing)
		}
		k.cfg.log.Warn("waiting for topics to exist; not ready", "topics", waitFor, "retry_in", wait)
		if !pause() {
			return nil, nil
		}
	}
}

// judgeTopics returns the topics that exist, with a *TopicError for each
// class that has none of its topics. Only when no class has (the start
// goes on) does it log each missing topic: the class runs without it.
func (k *consumer) judgeTopics(missing map[string]bool) ([]string, error) {
	var errs []error
	for _, c := range k.cfg.classes {
		n := 0
		for _, t := range c.Topics {
			if missing[t] {
				n++
			}
		}
		if n > 0 && n == len(c.Topics) {
			errs = append(errs, &TopicError{Class: c.Name, Topics: slices.Clone(c.Topics)})
		}
	}
	present := slices.DeleteFunc(slices.Clone(k.cfg.topics), func(t string) bool { return missing[t] })
	if len(errs) > 0 {
		return present, errors.Join(errs...)
	}
	for _, c := range k.cfg.classes {
		for _, t := range c.Topics {
			if missing[t] {
				k.cfg.log.Warn("topic does not exist; its class runs without it and the runtime is not ready", "topic", t, "class", c.Name)
			}
		}
	}
	k.present = present // what Start joins
	return present, nil
}

// missingTopics returns the configured topics the brokers do not know,
// asking through the client.
func (k *consumer) missingTopics(ctx context.Context) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return k.client.Missing(ctx, k.cfg.topics)
}
