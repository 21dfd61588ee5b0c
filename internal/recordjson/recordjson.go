// Package recordjson is the JSON form of messages and dead letters that
// the admin API (GET /api/dead, /api/dead/{key}, /api/delayed) and the
// CLI (handoff dead show --json, dead list --json) both print: one type
// and one encoder, so that the two cannot drift apart.
//
// Byte fields (message_key, value, a header's value) are base64, null
// when nil and "" when empty, so nil and empty stay apart; each has a
// *_text twin, present when the bytes are valid UTF-8.
package recordjson

import (
	"time"
	"unicode/utf8"

	"github.com/handoff-go/handoff"
)

// Message is a message envelope.
type Message struct {
	ID             string    `json:"id"`
	Class          string    `json:"class"`
	MessageKey     []byte    `json:"message_key"`
	MessageKeyText *string   `json:"message_key_text,omitempty"`
	Value          []byte    `json:"value"`
	ValueText      *string   `json:"value_text,omitempty"`
	Headers        []Header  `json:"headers"`
	Topic          string    `json:"topic,omitempty"`
	Partition      int       `json:"partition"`
	Offset         int64     `json:"offset"`
	Timestamp      time.Time `json:"timestamp,omitzero"`
	Attempt        int       `json:"attempt"`
	FirstSeen      time.Time `json:"first_seen,omitzero"`
}

// Header is one record header.
type Header struct {
	Key       string  `json:"key"`
	Value     []byte  `json:"value"`
	ValueText *string `json:"value_text,omitempty"`
}

// Text returns b as a string when it is valid UTF-8, else nil (and nil
// for a nil b).
func Text(b []byte) *string {
	if b == nil || !utf8.Valid(b) {
		return nil
	}
	s := string(b)
	return &s
}

// MessageOf returns m's JSON form.
func MessageOf(m *handoff.Message) Message {
	j := Message{
		ID: m.ID, Class: m.Class, MessageKey: m.Key, MessageKeyText: Text(m.Key), Value: m.Value, ValueText: Text(m.Value),
		Headers: make([]Header, len(m.Headers)), Topic: m.Origin.Topic, Partition: m.Origin.Partition, Offset: m.Origin.Offset,
		Timestamp: m.Timestamp, Attempt: m.Attempt, FirstSeen: m.FirstSeen,
	}
	for i, h := range m.Headers {
		j.Headers[i] = Header{Key: h.Key, Value: h.Value, ValueText: Text(h.Value)}
	}
	return j
}

// Dead is a dead letter: its ID (the same on every instance of the
// group, see runtime.DeadLetter.Key), the message (Attempt counts the
// failed attempts), why it was saved and its failures.
type Dead struct {
	Key string `json:"key"`
	Message
	Reason       string    `json:"reason"`
	Error        string    `json:"error"`
	Redeliveries int       `json:"redeliveries"`
	FirstFailed  time.Time `json:"first_failed,omitzero"`
	LastFailed   time.Time `json:"last_failed,omitzero"`
}

// DeadFields are what a dead letter keeps besides its key and message.
type DeadFields struct {
	Reason, Err             string
	Redeliveries            int
	FirstFailed, LastFailed time.Time
}

// DeadOf returns the JSON form of the dead letter with ID key.
func DeadOf(key string, m *handoff.Message, f DeadFields) Dead {
	return Dead{Key: key, Message: MessageOf(m), Reason: f.Reason, Error: f.Err, Redeliveries: f.Redeliveries,
		FirstFailed: f.FirstFailed, LastFailed: f.LastFailed}
}
