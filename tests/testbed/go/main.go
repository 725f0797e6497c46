// The Go side of the polyglot root-cause test bed (tests/rca_testbed_polyglot.rs),
// one role per process:
//
//	testbed inventory|reservations|certs|driver
//	testbed storm-shop|storm-supplier (the retry bed, storm.go)
//
// Each role is instrumented by the stock OpenTelemetry Go libraries only
// (otelhttp with otelhttptrace, otelgrpc), exporting OTLP/HTTP where
// OTEL_EXPORTER_OTLP_ENDPOINT says; no span attribute is added by hand. The
// faults are real mechanisms: a quote whose work outlives the caller's gRPC
// deadline, go-retryablehttp retrying a draining upstream or backing off
// after an inner NGINX's 429s, a TLS server whose handshake is slow, a gRPC
// server stopped under its callers. Ground truth is what the mechanism
// observed, one JSON line per trace id appended to TRUTH_FILE.
//
// gRPC messages are opaque bytes (a codec of its own), so neither side needs
// protoc: the methods, their deadlines and their status codes are real gRPC.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/httptrace/otelhttptrace"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func env(k string) string {
	v := os.Getenv(k)
	if v == "" {
		log.Fatalf("%s is not set", k)
	}
	return v
}

// truth appends one line per observation; O_APPEND keeps lines whole across processes.
var truthMu sync.Mutex
var truthFile *os.File

func record(o map[string]any) {
	b, _ := json.Marshal(o)
	truthMu.Lock()
	defer truthMu.Unlock()
	_, _ = truthFile.Write(append(b, '\n'))
}

func traceID(ctx context.Context) string {
	return trace.SpanContextFromContext(ctx).TraceID().String()
}

// rawCodec carries gRPC messages as the bytes they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

type unaryFn func(ctx context.Context, req []byte) ([]byte, error)

func serviceDesc(service string, methods map[string]unaryFn) *grpc.ServiceDesc {
	d := &grpc.ServiceDesc{ServiceName: service, HandlerType: (*any)(nil)}
	for name, fn := range methods {
		fn := fn
		d.Methods = append(d.Methods, grpc.MethodDesc{
			MethodName: name,
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var in []byte
				if err := dec(&in); err != nil {
					return nil, err
				}
				out, err := fn(ctx, in)
				if err != nil {
					return nil, err
				}
				return &out, nil
			},
		})
	}
	return d
}

func grpcServer() *grpc.Server {
	return grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.StatsHandler(otelgrpc.NewServerHandler()))
}

func grpcClient(addr string) *grpc.ClientConn {
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()))
	if err != nil {
		log.Fatal(err)
	}
	return conn
}

func setupTracing(ctx context.Context) func() {
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		log.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tp.Shutdown(c)
	}
}

// An HTTP client as instrumented by otelhttp, with the connection phases
// (DNS, connect, TLS) as spans of their own through otelhttptrace.
func tracedTransport(base *http.Transport) http.RoundTripper {
	return otelhttp.NewTransport(base, otelhttp.WithClientTrace(func(ctx context.Context) *httptrace.ClientTrace {
		return otelhttptrace.NewClientTrace(ctx)
	}))
}

func serveHTTP(port string, mux *http.ServeMux, service string) {
	h := otelhttp.NewHandler(mux, service, otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		if r.Pattern != "" {
			return r.Pattern
		}
		return r.Method
	}))
	log.Fatal(http.ListenAndServe("127.0.0.1:"+port, h))
}

func listen(port string) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		log.Fatal(err)
	}
	return l
}

// work hashes `items` times, checking the caller's deadline as it goes.
func work(ctx context.Context, items int) error {
	h := sha256.Sum256([]byte("quote"))
	for i := 0; i < items; i++ {
		if i%1000 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		h = sha256.Sum256(h[:])
	}
	return nil
}

// What a client's attempts saw: five or more quick attempts answered 503
// met an unavailable supplier (the retries are what its draining caused);
// a 429 among them, a rate limit it backed off from; fewer 503s are too
// short a drain to call either way.
func attemptsSaw(statuses []int) string {
	has := func(code int) bool {
		for _, s := range statuses {
			if s == code {
				return true
			}
		}
		return false
	}
	switch {
	case has(429):
		return "rate_limited"
	case has(503) && len(statuses) >= 5:
		return "upstream_unavailable"
	case has(503):
		return "ambiguous"
	case len(statuses) == 1 && statuses[0] == 200:
		return "healthy"
	}
	return fmt.Sprintf("unexpected-%v", statuses)
}

func inventory() {
	ledger := grpcClient(env("LEDGER_ADDR"))
	// go-redis with its OpenTelemetry hooks: a span per command.
	rdb := redis.NewClient(&redis.Options{Addr: env("REDIS_ADDR")})
	if err := redisotel.InstrumentTracing(rdb); err != nil {
		log.Fatal(err)
	}
	srv := grpcServer()
	srv.RegisterService(serviceDesc("inventory.Stock", map[string]unaryFn{
		// A quote's cost grows with its items; a big one outlives the
		// caller's deadline, and the handler sees it expire.
		"Quote": func(ctx context.Context, req []byte) ([]byte, error) {
			var q struct{ Items int }
			_ = json.Unmarshal(req, &q)
			t0 := time.Now()
			if err := rdb.Incr(ctx, "quotes").Err(); err != nil {
				return nil, status.Error(codes.Unavailable, err.Error())
			}
			if err := work(ctx, q.Items); err != nil {
				// The caller's deadline (grpc-timeout) passed while it
				// worked; grpc-java then cancels the stream, so the
				// context may end canceled a moment before its own timer.
				saw := "unexpected-" + err.Error()
				if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl.Add(-20*time.Millisecond)) {
					saw = "upstream_timeout"
				}
				record(map[string]any{"trace_id": traceID(ctx), "observed": saw, "worked_ms": time.Since(t0).Milliseconds()})
				return nil, status.FromContextError(err).Err()
			}
			return []byte(`{"price":42}`), nil
		},
	}), struct{}{})
	go func() { log.Fatal(srv.Serve(listen(env("GRPC_PORT")))) }()

	plain := &http.Transport{MaxIdleConnsPerHost: 16}
	// go-retryablehttp over otelhttp: one client span per attempt. A client
	// per call, so its hook collects that call's statuses.
	type policy struct {
		max     int
		wait    time.Duration
		timeout time.Duration
	}
	storm, polite := policy{7, 20 * time.Millisecond, 5 * time.Second}, policy{2, 500 * time.Millisecond, 5 * time.Second}
	// Each attempt given up after 60 ms, against a supplier that takes 300.
	impatient := policy{7, 20 * time.Millisecond, 60 * time.Millisecond}
	attempts := map[string]int{}
	var attemptsMu sync.Mutex
	call := func(ctx context.Context, p policy, url string) ([]int, error) {
		var statuses []int
		c := retryablehttp.NewClient()
		c.HTTPClient = &http.Client{Transport: tracedTransport(plain), Timeout: p.timeout}
		c.RetryMax, c.RetryWaitMin, c.RetryWaitMax = p.max, p.wait, 4*p.wait
		c.Logger = nil
		id := traceID(ctx)
		c.RequestLogHook = func(_ retryablehttp.Logger, _ *http.Request, _ int) {
			attemptsMu.Lock()
			attempts[id]++
			attemptsMu.Unlock()
		}
		c.ResponseLogHook = func(_ retryablehttp.Logger, r *http.Response) { statuses = append(statuses, r.StatusCode) }
		req, _ := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return statuses, err
	}
	mux := http.NewServeMux()
	restock := func(upstream string, p policy) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			statuses, err := call(ctx, p, upstream)
			record(map[string]any{"trace_id": traceID(ctx), "observed": attemptsSaw(statuses), "supplier_statuses": statuses})
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			// The ledger, in Java, over gRPC with a deadline.
			cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			var out []byte
			in := []byte(`{"sku":"restock"}`)
			if err := ledger.Invoke(cctx, "/ledger.Ledger/Record", &in, &out); err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			fmt.Fprintln(w, "ok")
		}
	}
	mux.HandleFunc("GET /restock", restock(env("SUPPLIER_URL"), storm))
	mux.HandleFunc("GET /restock-limited", restock(env("INNER_GATEWAY")+"/supplier", polite))
	// A hold on stock, over gRPC to reservations through failsafe-go's
	// breaker with its defaults (one failure opens it for a minute). The
	// truth is what the call returned: UNAVAILABLE from grpc-go, or the
	// breaker's own ErrOpen (no call made).
	reservations := grpcClient(env("RESERVATIONS_ADDR"))
	breaker := failsafe.With[any](circuitbreaker.NewWithDefaults[any]())
	mux.HandleFunc("GET /hold", func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		err := breaker.Run(func() error {
			var out []byte
			in := []byte(`{"sku":"hold"}`)
			return reservations.Invoke(ctx, "/inventory.Stock/Reserve", &in, &out)
		})
		if err != nil {
			saw := "unexpected-" + err.Error()
			switch {
			case errors.Is(err, circuitbreaker.ErrOpen):
				saw = "circuit_open"
			case status.Code(err) == codes.Unavailable:
				saw = "upstream_unavailable"
			}
			record(map[string]any{"trace_id": traceID(ctx), "observed": saw})
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "held")
	})
	// A supplier too slow for the client's 60 ms: every attempt gives up
	// and is retried at once. The truth is the client's own count: six or
	// more attempts, none answered: its timeouts are the cause.
	mux.HandleFunc("GET /restock-slow", func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		statuses, err := call(ctx, impatient, env("SLOW_URL"))
		attemptsMu.Lock()
		n := attempts[traceID(ctx)]
		delete(attempts, traceID(ctx))
		attemptsMu.Unlock()
		saw := "ambiguous"
		if n >= 6 && len(statuses) == 0 {
			// One request's retries: a transient failure retried.
			saw = "upstream_timeout"
		}
		record(map[string]any{"trace_id": traceID(ctx), "observed": saw, "attempts": n, "supplier_statuses": statuses})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	// The catalog is fetched over TLS on a fresh connection each time.
	certs := env("CERTS_ADDR")
	catalog := &http.Client{Timeout: 5 * time.Second}
	mux.HandleFunc("GET /catalog", func(w http.ResponseWriter, r *http.Request) {
		name := "certs.test"
		if r.URL.Query().Get("tls") == "slow" {
			name = "slow.certs.test"
		}
		tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{ServerName: name, InsecureSkipVerify: true}}
		c := *catalog
		c.Transport = tracedTransport(tr)
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, "https://"+certs+"/catalog", nil)
		resp, err := c.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		_, _ = io.Copy(w, resp.Body)
		resp.Body.Close()
	})
	serveHTTP(env("PORT"), mux, "inventory")
}

// reservations: a gRPC server the driver stops and starts (its callers see UNAVAILABLE).
func reservations() {
	var mu sync.Mutex
	var srv *grpc.Server
	start := func() {
		mu.Lock()
		defer mu.Unlock()
		if srv != nil {
			return
		}
		srv = grpcServer()
		srv.RegisterService(serviceDesc("inventory.Stock", map[string]unaryFn{
			"Reserve": func(ctx context.Context, req []byte) ([]byte, error) { return []byte(`{"reserved":true}`), nil },
		}), struct{}{})
		l := listen(env("GRPC_PORT"))
		go func(s *grpc.Server) { _ = s.Serve(l) }(srv)
	}
	start()
	admin := http.NewServeMux()
	admin.HandleFunc("/stop", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		if srv != nil {
			srv.Stop()
			srv = nil
		}
		mu.Unlock()
		fmt.Fprintln(w, "stopped")
	})
	admin.HandleFunc("/start", func(w http.ResponseWriter, _ *http.Request) {
		start()
		fmt.Fprintln(w, "started")
	})
	// A slow answer (300 ms), traced: the supplier of inventory's impatient client.
	admin.Handle("GET /slow", otelhttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(300 * time.Millisecond)
		fmt.Fprintln(w, `{"supplied":true}`)
	}), "GET /slow"))
	log.Fatal(http.ListenAndServe("127.0.0.1:"+env("PORT"), admin))
}

// certs: an HTTPS server whose handshake is slow for the name slow.certs.test
// (its certificate callback waits), as a server with a slow key store is.
func certs() {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "certs.test"},
		DNSNames: []string{"certs.test", "slow.certs.test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	delay, _ := strconv.Atoi(env("SLOW_HANDSHAKE_MS"))
	cfg := &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if strings.HasPrefix(h.ServerName, "slow.") {
			time.Sleep(time.Duration(delay) * time.Millisecond)
			record(map[string]any{"slow_handshake_ms": delay})
		}
		return &cert, nil
	}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /catalog", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, `{"items":3}`) })
	l := tls.NewListener(listen(env("PORT")), cfg)
	h := otelhttp.NewHandler(mux, "certs", otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Pattern }))
	log.Fatal(http.Serve(l, h))
}

func main() {
	log.SetFlags(log.Lmicroseconds)
	f, err := os.OpenFile(env("TRUTH_FILE"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	truthFile = f
	if len(os.Args) < 2 {
		log.Fatal("usage: testbed inventory|reservations|certs|driver|storm-shop|storm-supplier")
	}
	shutdown := setupTracing(context.Background())
	defer shutdown()
	switch os.Args[1] {
	case "inventory":
		inventory()
	case "reservations":
		reservations()
	case "certs":
		certs()
	case "driver":
		driver()
	case "storm-shop":
		stormShop()
	case "storm-supplier":
		stormSupplier()
	default:
		log.Fatalf("unknown role %s", os.Args[1])
	}
}
