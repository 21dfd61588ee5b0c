package runtime

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// HandleSignals makes the first of sigs start rt's graceful stop and a
// second one skip the rest of the drain (the hard stop and the snapshot
// still run). With no sigs it listens for SIGINT and SIGTERM. It returns a
// function that stops listening; call it after [Runtime.Run] returns.
//
// The runtime itself installs no signal handler: signals belong to the
// program.
func HandleSignals(rt *Runtime, sigs ...os.Signal) (stop func()) {
	if len(sigs) == 0 {
		sigs = []os.Signal{os.Interrupt, syscall.SIGTERM}
	}
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, sigs...)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 0; n < 2; n++ {
			select {
			case s := <-ch:
				if n == 0 {
					rt.log.Info("signal received; stopping gracefully", "signal", s.String())
					rt.life.requestStop()
				} else {
					rt.log.Warn("second signal received; skipping the rest of the drain", "signal", s.String())
					rt.life.skipDrain()
				}
			case <-quit:
				return
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			signal.Stop(ch)
			close(quit)
			wg.Wait()
		})
	}
}
