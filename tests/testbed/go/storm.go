// The retry bed (tests/rca_testbed_retries.rs): a shop whose purchases call
// a supplier through go-retryablehttp over otelhttp, each attempt given up
// after 100 ms, retried 10-40 ms later, up to 8 attempts; and a supplier
// whose four workers take 10 ms a request and finish what they began even
// when the caller gave up (as servers do). One slow purchase alone is a
// transient failure being retried; many at once push the supplier past its
// workers, their timed-out attempts are retried into the work the earlier
// ones left, and the retries multiply its load: a retry storm.
//
// The ground truth is the shop's own count: for each purchase, its attempts,
// whether one was answered, and the retries the shop sent the supplier in
// the second before the purchase ended (every purchase's, counted as they
// go out).
package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
)

// retryClock counts the retries sent, per 10 ms slot over the last second.
type retryClock struct {
	mu    sync.Mutex
	slots [100]int
	at    [100]int64
}

func (c *retryClock) add(now time.Time) {
	slot := now.UnixMilli() / 10
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slot % 100
	if c.at[i] != slot {
		c.at[i], c.slots[i] = slot, 0
	}
	c.slots[i]++
}

// lastSecond is the retries sent in the second before now.
func (c *retryClock) lastSecond(now time.Time) int {
	slot := now.UnixMilli() / 10
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for i := range c.slots {
		if slot-c.at[i] < 100 {
			n += c.slots[i]
		}
	}
	return n
}

func stormShop() {
	supplier := env("SUPPLIER_URL")
	plain := &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0}
	var clock retryClock
	buy := func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		attempts := 0
		c := retryablehttp.NewClient()
		c.HTTPClient = &http.Client{Transport: otelhttp.NewTransport(plain), Timeout: 100 * time.Millisecond}
		c.RetryMax, c.RetryWaitMin, c.RetryWaitMax = 7, 10*time.Millisecond, 40*time.Millisecond
		c.Logger = nil
		c.RequestLogHook = func(_ retryablehttp.Logger, _ *http.Request, n int) {
			attempts++
			if n > 0 {
				clock.add(time.Now())
			}
		}
		req, _ := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, supplier+"/stock", nil)
		resp, err := c.Do(req)
		answered := err == nil && resp.StatusCode == http.StatusOK
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		record(map[string]any{
			"trace_id": traceID(ctx), "attempts": attempts, "answered": answered,
			"retries_last_second": clock.lastSecond(time.Now()),
		})
		if !answered {
			http.Error(w, "the supplier did not answer", http.StatusBadGateway)
			return
		}
		fmt.Fprintln(w, "bought")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /buy", buy)
	// The load, untraced: `c` buyers, each buying again as soon as its
	// purchase ends, for `secs` seconds.
	go func() {
		admin := http.NewServeMux()
		admin.HandleFunc("GET /drive", func(w http.ResponseWriter, r *http.Request) {
			c, _ := strconv.Atoi(r.URL.Query().Get("c"))
			secs, _ := strconv.Atoi(r.URL.Query().Get("secs"))
			shop := "http://127.0.0.1:" + env("PORT") + "/buy"
			until := time.Now().Add(time.Duration(secs) * time.Second)
			var wg sync.WaitGroup
			var bought atomic.Int64
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
			for i := 0; i < c; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(until) {
						resp, err := client.Get(shop)
						if err == nil {
							_, _ = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
							bought.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			fmt.Fprintln(w, bought.Load())
		})
		serveAdmin(env("ADMIN_PORT"), admin)
	}()
	serveHTTP(env("PORT"), mux, "shop")
}

func stormSupplier() {
	workers := make(chan struct{}, 4)
	var workMs atomic.Int64
	workMs.Store(10)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stock", func(w http.ResponseWriter, r *http.Request) {
		// A worker, then the work, finished whether or not the caller
		// still waits.
		workers <- struct{}{}
		time.Sleep(time.Duration(workMs.Load()) * time.Millisecond)
		<-workers
		fmt.Fprintln(w, `{"stock":7}`)
	})
	go func() {
		admin := http.NewServeMux()
		admin.HandleFunc("GET /work", func(w http.ResponseWriter, r *http.Request) {
			ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
			workMs.Store(int64(ms))
			fmt.Fprintln(w, ms)
		})
		serveAdmin(env("ADMIN_PORT"), admin)
	}()
	serveHTTP(env("PORT"), mux, "supplier")
}

// serveAdmin serves a role's controls, untraced.
func serveAdmin(port string, mux *http.ServeMux) {
	srv := &http.Server{Addr: "127.0.0.1:" + port, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
