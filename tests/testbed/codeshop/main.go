// The code-level test bed (tests/rca_testbed_code.rs): a Go service whose
// requests are slow because of its own code, one role per process:
//
//	codeshop shop|front|driver
//
// `shop` serves three routes under otelhttp, its tracer provider wrapped by
// github.com/grafana/otel-profiling-go (CPU samples carry the local root
// span's id as the `span_id` pprof label), net/http/pprof on PPROF_PORT with
// the runtime's mutex profiling on:
//
//	/parse?n=N    main.parseAST hashes N times (CPU in the service's code)
//	/symbols      main.lookupSymbols takes the symbol table's lock, which
//	              main.refreshSymbols holds for HOLD ms when the driver
//	              sets it (POST /hold?ms= on the pprof port)
//	/render?n=N   main.renderPage builds N small linked nodes (allocation
//	              that drives the GC)
//	/tariffs      main.lookupTariffs takes the tariff table's lock; with
//	              ?reprice=MS the request is the holder: main.repriceTariffs
//	              holds that lock MS ms (another request's lock)
//
// `front` forwards /api/* to the shop through an otelhttp client, so every
// trace has a caller. `driver` runs a phase: PHASE=warmup the routes'
// normal traffic, else the faults, one at a time, beside healthy traffic. Ground truth is what the
// mechanism did, measured by the shop for each request and appended to
// TRUTH_FILE as one JSON line per trace id: the work the driver asked for,
// the time the request waited for the lock, the GC cycles that ran while
// it allocated.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	otelpyroscope "github.com/grafana/otel-profiling-go"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func tracing(ctx context.Context) func() {
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		log.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	otel.SetTracerProvider(otelpyroscope.NewTracerProvider(tp))
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return func() { _ = tp.Shutdown(context.Background()) }
}

var (
	truthMu sync.Mutex
	truthF  *os.File
)

func truth(v map[string]any) {
	b, _ := json.Marshal(v)
	truthMu.Lock()
	defer truthMu.Unlock()
	truthF.Write(append(b, '\n'))
}

var sink [32]byte

//go:noinline
func parseAST(n int) {
	h := sha256.Sum256([]byte("causeway"))
	for i := 0; i < n; i++ {
		h = sha256.Sum256(h[:])
	}
	sink = h
}

var (
	symtab  sync.Mutex
	symbols = map[string]int{}
	holdMs  atomic.Int64
)

//go:noinline
func refreshSymbols() {
	symtab.Lock()
	if ms := holdMs.Load(); ms > 0 {
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
	symbols["refresh"]++
	symtab.Unlock()
}

// lookupSymbols is the guides' parseASTWithLock: it parses under the
// symbol table's lock. It returns how long it waited for the lock.
//
//go:noinline
func lookupSymbols() time.Duration {
	t := time.Now()
	symtab.Lock()
	waited := time.Since(t)
	parseAST(200)
	symbols["lookup"]++
	symtab.Unlock()
	return waited
}

var tariffs sync.Mutex

// repriceTariffs holds the tariff table's lock for `ms` (a request that
// reprices while others read).
//
//go:noinline
func repriceTariffs(ms int) {
	tariffs.Lock()
	time.Sleep(time.Duration(ms) * time.Millisecond)
	tariffs.Unlock()
}

// lookupTariffs reads under the tariff table's lock; it returns how long
// it waited for it.
//
//go:noinline
func lookupTariffs() time.Duration {
	t := time.Now()
	tariffs.Lock()
	waited := time.Since(t)
	parseAST(200)
	tariffs.Unlock()
	return waited
}

type node struct {
	next *node
	buf  [6]uint64
}

// renderPage builds a page of n nodes, the last 65536 of them alive at a
// time (its window): the garbage is short-lived and the live heap small,
// so the collector runs many times while a big page is built.
//
//go:noinline
func renderPage(n int) int {
	ring := make([]*node, 1<<16)
	for i := 0; i < n; i++ {
		// No node points at an older one: nothing outside the window
		// stays reachable.
		p := &node{}
		p.buf[0] = uint64(i)
		ring[i%len(ring)] = p
	}
	c := 0
	for _, p := range ring {
		if p != nil {
			c++
		}
	}
	return c
}

func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func shop() {
	defer tracing(context.Background())()
	runtime.SetMutexProfileFraction(1)
	go func() {
		for {
			refreshSymbols()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	// The pprof endpoints and the driver's lever, apart from the traffic.
	http.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		holdMs.Store(int64(ms))
	})
	go func() { log.Fatal(http.ListenAndServe("127.0.0.1:"+os.Getenv("PPROF_PORT"), nil)) }()
	mux := http.NewServeMux()
	label := func(r *http.Request) string { return r.Header.Get("X-Label") }
	tid := func(r *http.Request) string {
		return trace.SpanContextFromContext(r.Context()).TraceID().String()
	}
	mux.HandleFunc("/parse", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		t := time.Now()
		parseAST(n)
		truth(map[string]any{"trace_id": tid(r), "route": "/parse", "label": label(r),
			"function": "main.parseAST", "work": n, "ms": time.Since(t).Milliseconds()})
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/symbols", func(w http.ResponseWriter, r *http.Request) {
		t := time.Now()
		waited := lookupSymbols()
		total := time.Since(t)
		truth(map[string]any{"trace_id": tid(r), "route": "/symbols", "label": label(r),
			"function": "main.refreshSymbols", "waited_ms": waited.Milliseconds(), "ms": total.Milliseconds()})
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/tariffs", func(w http.ResponseWriter, r *http.Request) {
		t := time.Now()
		if ms, err := strconv.Atoi(r.URL.Query().Get("reprice")); err == nil {
			repriceTariffs(ms)
			truth(map[string]any{"trace_id": tid(r), "route": "/tariffs", "label": "holder",
				"function": "main.repriceTariffs", "held_ms": ms, "ms": time.Since(t).Milliseconds()})
			fmt.Fprintln(w, "ok")
			return
		}
		waited := lookupTariffs()
		truth(map[string]any{"trace_id": tid(r), "route": "/tariffs", "label": label(r),
			"function": "main.repriceTariffs", "waited_ms": waited.Milliseconds(),
			"ms": time.Since(t).Milliseconds()})
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/render", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		t, gc := time.Now(), gcCycles()
		renderPage(n)
		truth(map[string]any{"trace_id": tid(r), "route": "/render", "label": label(r),
			"function": "main.renderPage", "work": n, "gc_cycles": gcCycles() - gc,
			"ms": time.Since(t).Milliseconds()})
		fmt.Fprintln(w, "ok")
	})
	serve(otelhttp.NewHandler(mux, "shop", otelhttp.WithSpanNameFormatter(
		func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path })))
}

func serve(h http.Handler) {
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.Serve(ln, h))
}

func front() {
	defer tracing(context.Background())()
	shopURL := os.Getenv("SHOP_URL")
	client := &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport)}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), "GET",
			shopURL+r.URL.Path[len("/api"):]+"?"+r.URL.RawQuery, nil)
		req.Header.Set("X-Label", r.Header.Get("X-Label"))
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, err.Error(), 502)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
	})
	serve(otelhttp.NewHandler(mux, "front", otelhttp.WithSpanNameFormatter(
		func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path })))
}

// The driver: healthy traffic to learn each route's normal, then one fault
// at a time beside healthy traffic.
func driver() {
	frontURL, pprofURL := os.Getenv("FRONT_URL"), os.Getenv("SHOP_PPROF_URL")
	scale, _ := strconv.Atoi(os.Getenv("SCALE"))
	if scale < 1 {
		scale = 1
	}
	get := func(path, label string) {
		req, _ := http.NewRequest("GET", frontURL+path, nil)
		req.Header.Set("X-Label", label)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatalf("%s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			log.Fatalf("%s: %d", path, resp.StatusCode)
		}
	}
	hold := func(ms int) {
		resp, err := http.Post(fmt.Sprintf("%s/hold?ms=%d", pprofURL, ms), "", nil)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
	}
	healthy := map[string]string{
		"parse": "/api/parse?n=2000", "symbols": "/api/symbols", "render": "/api/render?n=2000",
		"tariffs": "/api/tariffs",
	}
	// The routes driven (ROUTES, default parse,symbols,render: the Java
	// bed's front serves those).
	routes := []string{"parse", "symbols", "render"}
	if r := os.Getenv("ROUTES"); r != "" {
		routes = strings.Split(r, ",")
	}
	// In parallel: `n` requests of `path` labelled `label`, `conc` at a
	// time, each client pausing `gap` after each answer.
	run := func(path, label string, n, conc int, gap time.Duration) {
		var wg sync.WaitGroup
		work := make(chan struct{}, n)
		for i := 0; i < n; i++ {
			work <- struct{}{}
		}
		close(work)
		for c := 0; c < conc; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range work {
					get(path, label)
					time.Sleep(gap)
				}
			}()
		}
		wg.Wait()
	}
	beside := func(label string, n int, fault func()) {
		done := make(chan struct{})
		go func() { fault(); close(done) }()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			for _, r := range routes {
				if i < n {
					get(healthy[r], label)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// PHASE=warmup: each route's normal (baselines need 20 of each; a
	// sampler's adaptive latency policy 100), WARMUP requests of each
	// route (default 30).
	if os.Getenv("PHASE") == "warmup" {
		warmup, _ := strconv.Atoi(os.Getenv("WARMUP"))
		if warmup < 1 {
			warmup = 30
		}
		for i := 0; i < warmup; i++ {
			for _, r := range routes {
				get(healthy[r], "warmup")
			}
		}
		return
	}
	n := 15 * scale
	// CPU: the parse of a big document.
	beside("healthy", 4*scale, func() { run("/api/parse?n=4000000", "cpu_hotspot", n, 2, 0) })
	// A lock: the refresh holds the symbol table for 300 ms at a time,
	// lookups arriving at any moment (a lookup that comes in the 20 ms the
	// lock is free does not wait).
	hold(300)
	beside("healthy", 4*scale, func() {
		run("/api/symbols", "lock_contention", n+n/2, 3, 70*time.Millisecond)
	})
	hold(0)
	// Another request's lock, at random: a reprice holds the tariff table
	// 100 to 400 ms, at random moments; lookups come at random gaps and
	// wait whatever is left of the hold they meet (the shop measures it).
	rng := rand.New(rand.NewSource(int64(66 * scale)))
	tariffFault := func() {
		var wg sync.WaitGroup
		for i := 0; i < 3; i++ {
			wg.Add(1)
			go func(seed int64) {
				defer wg.Done()
				r := rand.New(rand.NewSource(seed))
				for k := 0; k < 2*n; k++ {
					get("/api/tariffs", "lock_contention")
					time.Sleep(time.Duration(30+r.Intn(120)) * time.Millisecond)
				}
			}(int64(i + 1))
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for {
			select {
			case <-done:
				return
			default:
			}
			get(fmt.Sprintf("/api/tariffs?reprice=%d", 100+rng.Intn(300)), "holder")
			time.Sleep(time.Duration(100+rng.Intn(500)) * time.Millisecond)
		}
	}
	if slices.Contains(routes, "tariffs") {
		// Apart from the symbol table's contention by more than a mutex
		// profile's window (the pprof receiver's 15 s): a delta profile
		// has no time within its window, and two locks contended in one
		// window cannot be told apart by time (the correlate README says so).
		time.Sleep(16 * time.Second)
		beside("healthy", 4*scale, tariffFault)
		time.Sleep(16 * time.Second)
	}
	// Allocation: a page of three million nodes.
	beside("healthy", 4*scale, func() { run("/api/render?n=3000000", "gc_pressure", n, 2, 0) })
}

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: codeshop shop|front|driver")
	}
	if f := os.Getenv("TRUTH_FILE"); f != "" {
		var err error
		truthF, err = os.OpenFile(f, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			log.Fatal(err)
		}
	}
	switch os.Args[1] {
	case "shop":
		shop()
	case "front":
		front()
	case "driver":
		driver()
	default:
		log.Fatalf("unknown role %q", os.Args[1])
	}
}
