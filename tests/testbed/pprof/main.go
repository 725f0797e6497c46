// A Go process for the pprof receiver's test: net/http/pprof on PORT, a
// goroutine that spends its CPU in main.parseAST under the pprof labels
// otel-profiling-go sets (span_id, span_name), and a lock that
// main.holdSymbols holds while main.lookupSymbol waits for it, with the
// runtime's mutex profiling on. The standard library only.
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

func main() {
	runtime.SetMutexProfileFraction(1)
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
