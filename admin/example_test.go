package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/admin"
	"github.com/handoff-go/handoff/runtime"
)

// Mount the admin handler next to the service; readiness follows the
// runtime, and mutating endpoints need the token.
func ExampleNewHandler() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	reg := prometheus.NewRegistry()
	rt, err := runtime.New(runtime.Config{
		StatePath:  filepath.Join(dir, "state.db"),
		Registerer: reg,
		Classes: []runtime.Class{{Name: "mail",
			Handler: func(context.Context, *handoff.Message) error { return nil }}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	h, err := admin.NewHandler(rt, admin.Options{Token: "s3cret", Gatherer: reg})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	status := func(method, path string) int {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	fmt.Println("readyz before Run:", status("GET", "/readyz"))
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rt.Run(ctx); close(done) }()
	for !rt.Ready() { // Run recovers the state file first
		time.Sleep(time.Millisecond)
	}
	fmt.Println("readyz while running:", status("GET", "/readyz"))
	fmt.Println("requeue without the token:", status("POST", "/api/dead/1/requeue"))
	stop()
	<-done
	fmt.Println("readyz after the stop:", status("GET", "/readyz"))
	// Output:
	// readyz before Run: 503
	// readyz while running: 200
	// requeue without the token: 401
	// readyz after the stop: 503
}
