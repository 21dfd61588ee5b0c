package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/internal/rental"
	hrt "github.com/handoff-go/handoff/runtime"
)

// rentalPartitions is the partitions of each rental topic at the rental
// point, as the rental process tests run it (3 topics × 4).
const rentalPartitions = 4

// rentalClasses is examples/rental's service (internal/rental) as its main runs it: its
// class table (orders ordered, 8 workers, queue 64; users, 4 workers,
// queue 32, delayed redeliveries; heartbeats a batch class of 64, MaxWait
// 5ms, 4 calls, queue 256; each recycling its messages) with its own handlers, without simulated work,
// failures or an effects file, and a metrics registry with the Go and
// process collectors, as rental's main registers them. done is called
// after each handled message.
func rentalClasses(done func()) (*rental.Service, []hrt.Class, prometheus.Registerer, error) {
	svc, err := rental.New(rental.Options{OnDone: func(*handoff.Message) { done() }})
	if err != nil {
		return nil, nil, nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return svc, svc.Classes(), reg, nil
}
