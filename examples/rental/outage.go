package main

import (
	"log/slog"
	"strings"
	"time"

	"github.com/handoff-go/handoff/internal/rental"
)

// outageFlag is the repeatable -outage flag: CLASS:START:DURATION.
type outageFlag []rental.Outage

func (f *outageFlag) String() string {
	var s []string
	for _, o := range *f {
		s = append(s, o.String())
	}
	return strings.Join(s, ",")
}

func (f *outageFlag) Set(s string) error {
	o, err := rental.ParseOutage(s)
	if err != nil {
		return err
	}
	*f = append(*f, o)
	return nil
}

// logOutages logs the begin and end of each simulated outage, with the
// handler attempts it failed, and returns the function that stops it.
func logOutages(log *slog.Logger, h *rental.Service, outages []rental.Outage) func() {
	var timers []*time.Timer
	for i, o := range outages {
		begin, end := h.OutageWindow(i)
		timers = append(timers,
			time.AfterFunc(time.Until(begin), func() {
				log.Info("simulated outage begins", "class", o.Class, "duration", o.Duration)
			}),
			time.AfterFunc(time.Until(end), func() {
				log.Info("simulated outage ends", "class", o.Class, "duration", o.Duration, "attempts_failed", h.OutageFailed(i))
			}))
	}
	return func() {
		for _, t := range timers {
			t.Stop()
		}
	}
}
