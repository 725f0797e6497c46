"""The Python test bed: Flask services instrumented by the stock OpenTelemetry
SDK and instrumentations from PyPI (flask, requests, grpc), with libraries no
causeway rule names: the `circuitbreaker` package's breaker (default settings)
over the calls to pricing, a grpcio client whose spans carry no
`server.address`, and SQLAlchemy's connection pool under its stock
instrumentation, which writes the pool's checkout as a span named `connect`.

Roles (argv[1]):
- pricing: a Flask app; `/price` answers, `/flaky` answers 503 to every
  other call; `/admin/exit` (untraced) ends the process: the server goes away.
- reservations: a grpcio server of `reservations.Book/Hold` (raw bytes, no
  generated code); an untraced admin HTTP port whose `/exit` ends it.
- api: a Flask app; `/quote` calls pricing through `@circuit`, `/hold` calls
  reservations over gRPC, `/quote-retry` retries pricing's `/flaky` once,
  `/quote-adapter-retry` has urllib3's `Retry` do it inside requests;
  `/order` calls pricing's `/price` (no breaker) unless `?bad=1`, when its
  own validation raises `ValueError` in an internal span before any call;
  `/export` holds one of the two connections of its SQLAlchemy pool (SQLite)
  for HOLD_S seconds, `/report` takes one for a short query; `/admin/pool`
  (untraced) answers how many connections are checked out.
  Each request writes what the mechanism did to TRUTH_FILE: the exception the
  breaker or the client raised, or the statuses a retry saw.
- driver: the load, in phases; each request in a trace of its own.

Ground truth is what the libraries did: `CircuitBreakerError` raised by the
breaker refusing the call (its own state), `requests.ConnectionError` from a
call that went out and found nothing, grpcio's `StatusCode.UNAVAILABLE`,
the pool's own `checkout` event: how long `/report` waited for it, and the
application's own `ValueError` (no breaker library on that path).
"""

import json
import os
import sys
import threading
import time
import urllib.request


def env(name):
    v = os.environ.get(name)
    if v is None:
        raise SystemExit(f"{name} is not set")
    return v


_truth_lock = threading.Lock()


def record(**fields):
    """One line of ground truth."""
    with _truth_lock, open(env("TRUTH_FILE"), "a") as f:
        f.write(json.dumps(fields) + "\n")


def tracing():
    """The stock SDK, exporting OTLP/HTTP to causeway."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": env("OTEL_SERVICE_NAME")}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=200))
    trace.set_tracer_provider(provider)
    return provider


def trace_id():
    from opentelemetry import trace

    return format(trace.get_current_span().get_span_context().trace_id, "032x")


def admin_exit():
    """Answer, then end the process: the server goes away."""
    threading.Timer(0.05, lambda: os._exit(0)).start()
    return "exiting"


def pricing():
    tracing()
    from flask import Flask
    from opentelemetry.instrumentation.flask import FlaskInstrumentor

    app = Flask("pricing")
    FlaskInstrumentor().instrument_app(app, excluded_urls="admin")
    calls = {"flaky": 0}
    lock = threading.Lock()

    @app.get("/price")
    def price():
        return {"price": 42}

    @app.get("/flaky")
    def flaky():
        with lock:
            calls["flaky"] += 1
            n = calls["flaky"]
        if n % 2 == 1:
            return {"error": "try again"}, 503
        return {"price": 42}

    @app.get("/admin/exit")
    def exit_():
        return admin_exit()

    app.run(host="127.0.0.1", port=int(env("PORT")), threaded=True)


def reservations():
    tracing()
    from concurrent import futures
    from http.server import BaseHTTPRequestHandler, HTTPServer

    import grpc
    from opentelemetry.instrumentation.grpc import GrpcInstrumentorServer

    GrpcInstrumentorServer().instrument()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    handler = grpc.method_handlers_generic_handler(
        "reservations.Book",
        {"Hold": grpc.unary_unary_rpc_method_handler(lambda req, ctx: b'{"held":true}')},
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{env('GRPC_PORT')}")
    server.start()

    class Admin(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(admin_exit().encode())

        def log_message(self, *args):
            pass

    HTTPServer(("127.0.0.1", int(env("PORT"))), Admin).serve_forever()


def api():
    tracing()
    import grpc
    import requests
    from circuitbreaker import CircuitBreakerError, circuit
    from flask import Flask
    from opentelemetry.instrumentation.flask import FlaskInstrumentor
    from opentelemetry.instrumentation.grpc import GrpcInstrumentorClient
    from opentelemetry.instrumentation.requests import RequestsInstrumentor

    RequestsInstrumentor().instrument()
    GrpcInstrumentorClient().instrument()
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

    # Before sqlalchemy's names are imported: the instrumentation wraps
    # `create_engine` (the queries' spans) and `Engine.connect`.
    SQLAlchemyInstrumentor().instrument()
    from sqlalchemy import create_engine, event, text

    app = Flask("api")
    FlaskInstrumentor().instrument_app(app, excluded_urls="admin")
    # A pool of two connections (the application's sizing; the pool's other
    # settings its defaults).
    engine = create_engine(f"sqlite:///{env('DB_FILE')}", pool_size=2, max_overflow=0)
    checked_out = threading.local()
    event.listen(engine, "checkout", lambda *_: setattr(checked_out, "at", time.monotonic()))
    hold_s = float(env("HOLD_S"))
    pricing_url = env("PRICING_URL")
    channel = grpc.insecure_channel(env("RESERVATIONS_ADDR"))
    hold_rpc = channel.unary_unary("/reservations.Book/Hold")

    # The breaker with the library's defaults (5 failures open it for 30 s).
    @circuit
    def fetch_price():
        r = requests.get(f"{pricing_url}/price", timeout=5)
        r.raise_for_status()
        return r.json()

    @app.get("/quote")
    def quote():
        try:
            return fetch_price()
        except CircuitBreakerError:
            # The breaker refused: no request went out.
            record(trace_id=trace_id(), observed="circuit_open")
            raise
        except requests.ConnectionError:
            record(trace_id=trace_id(), observed="upstream_unavailable")
            raise

    @app.get("/hold")
    def hold():
        try:
            hold_rpc(b'{"sku":"a"}', timeout=5)
            return {"held": True}
        except grpc.RpcError as e:
            saw = "upstream_unavailable" if e.code() == grpc.StatusCode.UNAVAILABLE else f"unexpected-{e.code()}"
            record(trace_id=trace_id(), observed=saw)
            raise

    @app.get("/export")
    def export():
        with engine.connect() as c:
            c.execute(text("select 1"))
            time.sleep(hold_s)
        return {"exported": True}

    @app.get("/report")
    def report():
        asked = time.monotonic()
        with engine.connect() as c:
            waited = checked_out.at - asked
            c.execute(text("select 1"))
        # The pool's own callback says how long the checkout waited.
        saw = "queueing" if waited >= 0.1 else "healthy"
        record(trace_id=trace_id(), observed=saw, waited_ms=round(waited * 1000))
        return {"waited_ms": round(waited * 1000)}

    @app.get("/admin/pool")
    def pool():
        return {"checked_out": engine.pool.checkedout()}

    # urllib3's Retry inside requests: one client span, the attempts are
    # only the server spans under it (the library's defaults, but for one
    # retry of a 503 at once).
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    retrying = requests.Session()
    retrying.mount("http://", HTTPAdapter(max_retries=Retry(total=1, status_forcelist=[503], backoff_factor=0)))

    @app.get("/quote-adapter-retry")
    def quote_adapter_retry():
        # The history the adapter kept is not the attempts; pricing counts
        # them: its `/flaky` answers 503 to every other call.
        r = retrying.get(f"{pricing_url}/flaky", timeout=5)
        saw = "healthy" if r.status_code == 200 else f"unexpected-{r.status_code}"
        record(trace_id=trace_id(), observed=saw)
        return {"status": r.status_code}

    from flask import request
    from opentelemetry import trace

    tracer = trace.get_tracer("api")

    @app.get("/order")
    def order():
        # The application's own check fails fast, in a span of its own,
        # before any call: an exception, no breaker.
        with tracer.start_as_current_span("validate order"):
            if request.args.get("bad") == "1":
                record(trace_id=trace_id(), observed="error")
                raise ValueError("quantity must be positive")
        r = requests.get(f"{pricing_url}/price", timeout=5)
        r.raise_for_status()
        return r.json()

    @app.get("/quote-retry")
    def quote_retry():
        # One quick retry of a 503: the second answer is the request's.
        statuses = []
        for _ in range(2):
            r = requests.get(f"{pricing_url}/flaky", timeout=5)
            statuses.append(r.status_code)
            if r.ok:
                break
        saw = "healthy" if statuses == [503, 200] else f"unexpected-{statuses}"
        record(trace_id=trace_id(), observed=saw, statuses=statuses)
        return {"statuses": statuses}

    app.run(host="127.0.0.1", port=int(env("PORT")), threaded=True)


def driver():
    provider = tracing()
    import requests
    from opentelemetry import trace
    from opentelemetry.instrumentation.requests import RequestsInstrumentor

    RequestsInstrumentor().instrument()
    tracer = trace.get_tracer("load-driver")
    api_url = env("API_URL")

    def one(path, label):
        with tracer.start_as_current_span("request"):
            try:
                status = requests.get(f"{api_url}{path}", timeout=10).status_code
            except requests.RequestException:
                status = 0
            record(trace_id=trace_id(), path=path, status=status, label=label)

    def pool_checked_out():
        # urllib, which nothing instruments: the poll is not traced.
        with urllib.request.urlopen(f"{api_url}/admin/pool", timeout=5) as r:
            return json.load(r)["checked_out"]

    def pool_round():
        # Two holders take both connections; six reports then wait for them.
        holders = [threading.Thread(target=one, args=("/export", "holder")) for _ in range(2)]
        for t in holders:
            t.start()
        while pool_checked_out() < 2:
            time.sleep(0.01)
        reports = [threading.Thread(target=one, args=("/report", "observed")) for _ in range(6)]
        for t in reports:
            t.start()
        for t in holders + reports:
            t.join()

    def untraced(url):
        try:
            requests.get(url, timeout=5)
        except requests.RequestException:
            pass

    scale = int(os.environ.get("SCALE", "1"))
    for _ in range(scale):
        # Warm-up: each callee seen answering (its address, its RPC service).
        for _ in range(10):
            one("/quote", "warmup")
            one("/hold", "warmup")
        for _ in range(15):
            one("/quote", "healthy")
            one("/hold", "healthy")
        # A 503 retried once, at once, and answered: healthy.
        for _ in range(15):
            one("/quote-retry", "observed")
        for _ in range(15):
            one("/quote-adapter-retry", "observed")
        # The report route's normal traffic, as production has it (WARMUP,
        # default none): behind a sampler that keeps each route's p99,
        # the waits below are its tail.
        for _ in range(int(os.environ.get("WARMUP", "0"))):
            one("/report", "warmup")
        for _ in range(3):
            pool_round()
        # The api's calls to pricing failed (the 503s above) and were answered
        # since: an exception of its own, failing fast before any call, is
        # no breaker's refusal.
        for _ in range(10):
            one("/order", "warmup")
        for _ in range(10):
            one("/order?bad=1", "observed")
    # Reservations goes away: every hold meets UNAVAILABLE.
    untraced(env("RESERVATIONS_ADMIN") + "/exit")
    time.sleep(0.5)
    for _ in range(12):
        one("/hold", "observed")
    # Pricing goes away: the breaker's first five calls go out and fail,
    # then it refuses every call for 30 s without calling.
    untraced(env("PRICING_URL") + "/admin/exit")
    time.sleep(0.5)
    for _ in range(20):
        one("/quote", "observed")
        time.sleep(0.05)
    provider.shutdown()


if __name__ == "__main__":
    {"pricing": pricing, "reservations": reservations, "api": api, "driver": driver}[sys.argv[1]]()
