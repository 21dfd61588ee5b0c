package main

import (
	"fmt"

	"github.com/handoff-go/handoff/runtime"
)

// stopPolicyFlag is the -stop-policy flag: snapshot or redeliver.
type stopPolicyFlag struct{ p runtime.StopPolicy }

func (f *stopPolicyFlag) String() string { return f.p.String() }

func (f *stopPolicyFlag) Set(s string) error {
	switch s {
	case "snapshot":
		f.p = runtime.StopSnapshot
	case "redeliver":
		f.p = runtime.StopRedeliver
	default:
		return fmt.Errorf("want snapshot or redeliver, got %q", s)
	}
	return nil
}

// withStopPolicy returns classes with StopPolicy set to p.
func withStopPolicy(classes []runtime.Class, p runtime.StopPolicy) []runtime.Class {
	for i := range classes {
		classes[i].StopPolicy = p
	}
	return classes
}

// clientFlag is the -client flag: kafka-go or franz-go.
type clientFlag struct{ c runtime.Client }

func (f *clientFlag) String() string {
	if f.c == "" {
		return string(runtime.ClientFranzGo)
	}
	return string(f.c)
}

func (f *clientFlag) Set(s string) error {
	switch c := runtime.Client(s); c {
	case runtime.ClientKafkaGo, runtime.ClientFranzGo:
		f.c = c
	default:
		return fmt.Errorf("want %s or %s, got %q", runtime.ClientKafkaGo, runtime.ClientFranzGo, s)
	}
	return nil
}
