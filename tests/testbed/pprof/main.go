// A Go process for the pprof receiver's test: net/http/pprof on PORT, a
// goroutine that spends its CPU in main.parseAST under the pprof labels
// otel-profiling-go sets (span_id, span_name), and a lock that
// main.holdSymbols holds while main.lookupSymbol waits for it, and
// workers that wait on their channel in main.awaitJob (longer in all than
// the lock's waits), with the runtime's mutex and block profiling on. The
// standard library only.
package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"time"
)

var sink [32]byte

//go:noinline
func parseAST(n int) {
	h := sha256.Sum256([]byte("causeway"))
	for i := 0; i < n; i++ {
		h = sha256.Sum256(h[:])
	}
	sink = h
}

var symbols sync.Mutex

//go:noinline
func holdSymbols() {
	symbols.Lock()
	time.Sleep(20 * time.Millisecond)
	symbols.Unlock()
}

//go:noinline
func lookupSymbol() {
	symbols.Lock()
	symbols.Unlock()
}

// awaitJob waits for the next job on its channel: a wait the block
// profile records, which is no lock's.
//
//go:noinline
func awaitJob(jobs <-chan int) int {
	return <-jobs
}

func main() {
	runtime.SetMutexProfileFraction(1)
	runtime.SetBlockProfileRate(1)
	jobs := make(chan int)
	for i := 0; i < 8; i++ {
		go func() {
			for {
				awaitJob(jobs)
			}
		}()
	}
	go func() {
		for i := 0; ; i++ {
			time.Sleep(10 * time.Millisecond)
			jobs <- i
		}
	}()
	// The span a request would run under, as otel-profiling-go labels it.
	labels := pprof.Labels("span_id", os.Getenv("SPAN_ID"), "span_name", "POST /parse")
	go pprof.Do(context.Background(), labels, func(context.Context) {
		for {
			parseAST(20000)
		}
	})
	go func() {
		for {
			holdSymbols()
		}
	}()
	for i := 0; i < 4; i++ {
		go func() {
			for {
				lookupSymbol()
			}
		}()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		panic(err)
	}
	fmt.Println("ready")
	panic(http.Serve(ln, nil))
}
