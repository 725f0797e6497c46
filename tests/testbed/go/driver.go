package main

// The load driver: each request in a trace of its own (a root span and
// otelhttp's client span), through the edge NGINX. It records per trace id
// what it caused (a lock it held, an index it dropped, a handshake it asked
// to be slow) or "observed", where the service that met the fault records
// what it saw (a deadline expiring, a breaker refusing, the statuses of a
// client's attempts, a message's wait).

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
)

func driver() {
	ctx := context.Background()
	tracer := otel.Tracer("load-driver")
	gw := env("GATEWAY")
	client := &http.Client{Transport: otelhttp.NewTransport(&http.Transport{DisableKeepAlives: true}), Timeout: 20 * time.Second}
	// One request, one trace. label "observed": the service that met the
	// fault says what it was (`otherwise` when it says nothing).
	one := func(path, label, otherwise string) {
		c, span := tracer.Start(ctx, "request")
		req, _ := http.NewRequestWithContext(c, http.MethodGet, gw+path, nil)
		st := 0
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			st = resp.StatusCode
		}
		span.End()
		record(map[string]any{"trace_id": span.SpanContext().TraceID().String(), "path": path, "status": st, "label": label, "otherwise": otherwise})
	}
	many := func(n int, f func(i int)) {
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) { defer wg.Done(); f(i) }(i)
		}
		wg.Wait()
	}
	// Control calls, untraced: not part of the load.
	control := func(url string) {
		resp, err := http.Get(url)
		if err != nil {
			log.Fatalf("control %s: %v", url, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			log.Fatalf("control %s: %d", url, resp.StatusCode)
		}
	}
	pg, err := pgx.Connect(ctx, env("PG_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	exec := func(c *pgx.Conn, sql string) {
		if _, err := c.Exec(ctx, sql); err != nil {
			log.Fatalf("%s: %v", sql, err)
		}
	}
	orders, reservations, billing := env("ORDERS_ADMIN"), env("RESERVATIONS_ADMIN"), env("BILLING_ADMIN")
	scale, _ := strconv.Atoi(os.Getenv("SCALE"))
	scale = max(scale, 1)
	sku := func(i int) string { return fmt.Sprintf("/search?sku=sku-%d", 1+(i*7919)%3_000_000) }

	// Warm-up: the baselines of every operation the faults later slow.
	for i := 0; i < 25; i++ {
		one("/quote?items=2000", "warmup", "")
		one(sku(i), "warmup", "")
		one(fmt.Sprintf("/lock/%d", 1+i%5), "warmup", "")
	}
	for i := 0; i < 5; i++ {
		one("/restock", "warmup", "")
		one("/catalog", "warmup", "")
		one("/reserve", "warmup", "")
		one("/hold", "warmup", "")
		one("/hold-order", "warmup", "")
		one("/order", "warmup", "")
		one("/report", "warmup", "")
		one("/compute", "warmup", "")
	}
	// The normal traffic of the routes whose faults are slow requests
	// only (WARMUP of each, default none), as production has it: behind a
	// sampler that keeps each route's p99, the faults are then its tail.
	// (Not the tallies: a third of their bursts wait, no p99 of theirs.)
	warmup, _ := strconv.Atoi(os.Getenv("WARMUP"))
	for i := 0; i < warmup; i++ {
		one("/catalog", "warmup", "")
		one(sku(1000+i), "warmup", "")
		one(fmt.Sprintf("/lock/%d", 1+i%5), "warmup", "")
	}
	for round := 0; round < scale; round++ {
		for i := 0; i < 8; i++ {
			one("/quote?items=2000", "healthy", "")
			one(sku(100+round*50+i), "healthy", "")
			one(fmt.Sprintf("/lock/%d", 10+i), "healthy", "")
			one("/restock", "observed", "")
			one("/catalog", "healthy", "")
			one("/reserve", "observed", "")
			one("/hold", "healthy", "")
			one("/hold-order", "healthy", "")
			one("/order", "observed", "")
			one("/report", "healthy", "")
			one("/compute", "observed", "")
		}
		// A quote too big for the orders service's 300 ms gRPC deadline:
		// inventory sees the deadline expire while it works.
		for i := 0; i < 6; i++ {
			one("/quote?items=20000000", "observed", "")
		}
		// A supplier draining for 300 ms: inventory's go-retryablehttp
		// client retries it 20-80 ms apart (its statuses are the truth: the
		// drain, unavailable, caused the retries).
		for i := 0; i < 6; i++ {
			control(orders + "/admin/drain?ms=300")
			one("/restock", "observed", "")
		}
		// A supplier slower than inventory's 60 ms per attempt: the client
		// retries each timeout 20-80 ms later (its attempt count is the truth).
		for i := 0; i < 6; i++ {
			one("/restock-slow", "observed", "")
		}
		// Bursts of tallies, each holding one of the orders service's 8
		// pooled connections for 200 ms: the rest wait in HikariCP (the
		// handler measures its wait).
		for b := 0; b < 2; b++ {
			many(16, func(int) { one("/tally", "observed", "") })
			time.Sleep(500 * time.Millisecond)
		}
		// Bursts through the inner NGINX's limit_req: the rejected calls are
		// retried after its Retry-After.
		for b := 0; b < 3; b++ {
			many(4, func(int) { one("/restock-limited", "observed", "") })
			time.Sleep(1200 * time.Millisecond)
		}
		// A TLS server whose handshake is slow for the name asked.
		for i := 0; i < 6; i++ {
			one("/catalog?tls=slow", "tls_handshake", "")
		}
		// A row lock held by another transaction (SELECT ... FOR UPDATE)
		// while the orders service locks the same row.
		lock, err := pgx.Connect(ctx, env("PG_DSN"))
		if err != nil {
			log.Fatal(err)
		}
		exec(lock, "BEGIN")
		exec(lock, "SELECT qty FROM stock WHERE id = 7 FOR UPDATE")
		done := make(chan struct{})
		go func() {
			many(5, func(int) { one("/lock/7", "db_lock_contention", "") })
			close(done)
		}()
		time.Sleep(1500 * time.Millisecond)
		exec(lock, "COMMIT")
		<-done
		lock.Close(ctx)
		// A slow plan: the index the search uses is gone, PostgreSQL scans the table.
		exec(pg, "DROP INDEX items_sku")
		for i := 0; i < 6; i++ {
			one(sku(500+round*50+i), "slow_dependency", "")
		}
		exec(pg, "CREATE INDEX items_sku ON items (sku)")
		// Every connection slot of PostgreSQL taken by a batch job: the
		// orders service's reports cannot connect.
		var batch []*pgx.Conn
		for {
			c, err := pgx.Connect(ctx, env("PG_DSN"))
			if err != nil {
				break
			}
			batch = append(batch, c)
		}
		if len(batch) == 0 {
			log.Fatal("the batch job got no connection")
		}
		for i := 0; i < 5; i++ {
			one("/report", "db_connection_saturation", "")
		}
		for _, c := range batch {
			c.Close(ctx)
		}
		// The reservations server stops: the orders service's calls fail
		// UNAVAILABLE until its resilience4j breaker opens, then fail fast.
		control(reservations + "/stop")
		for i := 0; i < 14; i++ {
			one("/reserve", "observed", "")
		}
		// Inventory's failsafe-go breaker over the same server: its first
		// call fails UNAVAILABLE and opens it; it refuses the rest.
		for i := 0; i < 8; i++ {
			one("/hold", "observed", "")
		}
		// The orders service's Sentinel rule over the same server: three
		// calls fail UNAVAILABLE and open it; it refuses the rest for 10 s.
		for i := 0; i < 10; i++ {
			one("/hold-order", "observed", "")
		}
		control(reservations + "/start")
		time.Sleep(2500 * time.Millisecond)
		for i := 0; i < 4; i++ {
			one("/reserve", "observed", "")
		}
		// A CPU hog on the host (32 busy threads on its cores) for 25 s:
		// the orders service's CPU-bound work waits for a core. Requests
		// are made once the host's CPU has been saturated for a whole
		// hostmetrics interval (10 s by default), and the hog's effect is
		// measured from /proc/stat over its run.
		busyBefore := procStat()
		stop := make(chan struct{})
		prev := runtime.GOMAXPROCS(64)
		for i := 0; i < 32; i++ {
			go func() {
				h := sha256.Sum256([]byte("hog"))
				for {
					select {
					case <-stop:
						return
					default:
						h = sha256.Sum256(h[:])
					}
				}
			}()
		}
		time.Sleep(12 * time.Second)
		for i := 0; i < 6; i++ {
			one("/compute", "observed", "")
			time.Sleep(1500 * time.Millisecond)
		}
		time.Sleep(4 * time.Second)
		close(stop)
		runtime.GOMAXPROCS(prev)
		record(map[string]any{"cpu_hog_busy": busyBefore.busySince()})
		// Past the hostmetrics sample that covered the hog's end.
		time.Sleep(11 * time.Second)
		// Orders while billing's consumer is paused: they wait in the topic.
		control(billing + "/pause?ms=4000")
		for i := 0; i < 6; i++ {
			one("/order", "observed", "")
			time.Sleep(250 * time.Millisecond)
		}
		time.Sleep(4000 * time.Millisecond)
	}
	pg.Close(ctx)
}

// CPU time counters of the host (/proc/stat's first line).
type cpuTimes struct{ busy, total float64 }

func procStat() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		log.Fatal(err)
	}
	line := strings.SplitN(string(b), "\n", 2)[0]
	var c cpuTimes
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		c.total += v
		if i != 3 && i != 4 { // idle, iowait
			c.busy += v
		}
	}
	return c
}

// The share of the host's CPU time that was busy since c.
func (c cpuTimes) busySince() float64 {
	n := procStat()
	return (n.busy - c.busy) / (n.total - c.total)
}
