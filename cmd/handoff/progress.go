package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
)

// progress reports how many messages a replay has sent.
type progress interface {
	add(n int)
	finish()
}

// newProgress returns a progress bar when w is a terminal, else a
// progress printer that writes a line after the first batch and then at
// most once a second.
func newProgress(w io.Writer, total int) progress {
	if f, ok := w.(*os.File); ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
		return &barProgress{w: w, bar: progressbar.NewOptions(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription("replaying"),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("msgs"),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
		)}
	}
	return &lineProgress{w: w, total: total}
}

type barProgress struct {
	w   io.Writer
	bar *progressbar.ProgressBar
}

func (p *barProgress) add(n int) { p.bar.Add(n) }

// finish ends the bar's line when the replay stopped short of the total
// (a complete bar ends it itself).
func (p *barProgress) finish() {
	if !p.bar.IsFinished() {
		fmt.Fprintln(p.w)
	}
}

type lineProgress struct {
	w     io.Writer
	total int
	done  int
	last  time.Time // when a line was last printed; zero before the first
}

func (p *lineProgress) add(n int) {
	if n == 0 {
		return
	}
	p.done += n
	if now := time.Now(); p.last.IsZero() || now.Sub(p.last) >= time.Second || p.done == p.total {
		p.last = now
		fmt.Fprintf(p.w, "replayed %d/%d messages (%d%%)\n", p.done, p.total, p.done*100/max(p.total, 1))
	}
}

func (p *lineProgress) finish() {}
