"""The LLM test bed: a coding assistant like the guides' service, in front of
llama.cpp's own server (`llama-server`, real prefill, prompt cache, slots),
behind NGINX. Stock parts only: Flask, redis-py and the OpenAI client,
instrumented by the stock OpenTelemetry SDK and PyPI's instrumentations
(flask, redis, and the official GenAI one, opentelemetry-instrumentation-openai-v2).

Roles (argv[1]):
- assistant: `POST /assist` {session, question, client, repo, max_tokens}:
  the session's file from Redis (the session cache; built and stored on a
  miss), then a streamed chat completion from llama.cpp through the OpenAI
  client. The prompt is the system prompt, the file (about 2,000 tokens),
  with `repo` the rest of a repository the client sent whole (about 9,000
  tokens in all), and the question. Client `2.0` puts the current time at the
  head of the system prompt (a release that broke the cached prefix).
  Each call writes what llama.cpp did to TRUTH_FILE: the prompt tokens it
  processed and took from its cache, its prompt and generation times (the
  `timings` of its last chunk), and the time to the first chunk the
  service saw.
- driver: the load, in phases (see `driver`), each request in a trace of its
  own, sent through the gateway with its `traceparent`.
- pulse: a pulse of long contexts on the route, for its incident (see `pulse`).
- calibrate: llama.cpp's speed on this machine now (see `calibrate`).
"""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
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
    """The stock SDK, exporting OTLP/HTTP to causeway; `host.name` by the
    SDK's own host detector (OTEL_EXPERIMENTAL_RESOURCE_DETECTORS)."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": env("OTEL_SERVICE_NAME")}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=200))
    trace.set_tracer_provider(provider)
    return provider


def module(i):
    """One generated source file of the repository the assistant knows."""
    lines = [f"# module {i}: ledger helpers", "import math", ""]
    for j in range(60):
        lines.append(f"def helper_{i}_{j}(x, y):")
        lines.append(f"    return math.floor(x * {j + 1}) + y - {i}")
    return "\n".join(lines)


SYSTEM = "You are a careful coding assistant. Answer with code only."


def repository(repo):
    """The rest of a repository the client sent whole (four modules; a new
    repository each time, so llama.cpp's cache holds at most the prompt's
    head), or nothing."""
    if repo is None:
        return ""
    return "\n\n" + "\n\n".join(module(1 + 4 * int(repo) + j) for j in range(4))


def assistant():
    tracing()
    from flask import Flask, request
    from opentelemetry import trace
    from opentelemetry.instrumentation.flask import FlaskInstrumentor
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.instrumentation.redis import RedisInstrumentor
    import openai
    import redis

    RedisInstrumentor().instrument()
    OpenAIInstrumentor().instrument()
    app = Flask("assistant")
    FlaskInstrumentor().instrument_app(app)
    cache = redis.Redis(host="127.0.0.1", port=int(env("REDIS_PORT")))
    llm = openai.OpenAI(base_url=env("LLM_URL") + "/v1", api_key="unused", max_retries=0, timeout=120)

    def context(session):
        """The session's file, from the session cache (built and stored on a miss)."""
        key = f"session:{session}"
        got = cache.get(key)
        if got is not None:
            return got.decode()
        text = module(0)
        cache.set(key, text)
        return text

    @app.post("/assist")
    def assist():
        body = request.get_json()
        system = SYSTEM
        if body.get("client") == "2.0":
            system = f"Current time: {time.time():.6f}\n" + SYSTEM
        messages = [
            {"role": "system", "content": system + "\n\n" + context(body["session"]) + repository(body.get("repo"))},
            {"role": "user", "content": body["question"]},
        ]
        t0 = time.monotonic()
        first = None
        timings, usage = None, None
        stream = llm.chat.completions.create(
            model="tiny",
            messages=messages,
            max_tokens=int(body.get("max_tokens", 16)),
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            if first is None and chunk.choices:
                first = time.monotonic()
            extra = chunk.model_extra or {}
            timings = extra.get("timings", timings)
            usage = chunk.usage or usage
        wall = time.monotonic() - t0
        trace_id = format(trace.get_current_span().get_span_context().trace_id, "032x")
        record(
            trace_id=trace_id,
            call_ms=wall * 1000,
            ttft_ms=None if first is None else (first - t0) * 1000,
            prompt_n=(timings or {}).get("prompt_n"),
            cache_n=(timings or {}).get("cache_n"),
            prompt_ms=(timings or {}).get("prompt_ms"),
            predicted_n=(timings or {}).get("predicted_n"),
            predicted_ms=(timings or {}).get("predicted_ms"),
            prompt_tokens=usage.prompt_tokens if usage else None,
        )
        return {"tokens": usage.completion_tokens if usage else None}

    app.run(host="127.0.0.1", port=int(env("PORT")), threaded=True)


def sender(tracer, gateway, pace=0.0):
    """`one(phase, body, headers)`: a request through the gateway in a trace
    of its own (its `traceparent` sent), its phase and status recorded; at
    most one every `pace` seconds. `one.sent` counts them."""
    from opentelemetry import propagate, trace

    def one(phase, body, headers=None):
        one.sent += 1
        t0 = time.monotonic()
        n = one.sent
        body = {"session": n % 3, "question": f"Write a test for helper_0_{n % 50}.", **body}
        with tracer.start_as_current_span("POST /assist", kind=trace.SpanKind.CLIENT) as span:
            h = {"Content-Type": "application/json", **(headers or {})}
            propagate.inject(h)
            trace_id = format(span.get_span_context().trace_id, "032x")
            req = urllib.request.Request(gateway + "/assist", data=json.dumps(body).encode(), headers=h)
            try:
                with urllib.request.urlopen(req, timeout=120) as r:
                    status = r.status
                    r.read()
            except urllib.error.HTTPError as e:
                status = e.code
            span.set_attribute("http.response.status_code", status)
        record(trace_id=trace_id, phase=phase, status=status)
        time.sleep(max(pace - (time.monotonic() - t0), 0))
        return status

    one.sent = 0
    return one


def calibrate():
    """How fast llama.cpp is on this machine now, by its own timings: a
    prompt of the long shape (the system prompt, a file and a whole
    repository) none of which is cached, and 64 tokens after a prompt of the
    usual shape. Prints `{"long_prompt_ms", "decode_ms_per_token"}`: the
    test sets the gateway's read timeout above the first and the timeout
    phase's answers past it by the second, so that a busy machine's long
    prompts stay long prompts and its timeouts stay timeouts."""

    def complete(prompt, n_predict):
        req = urllib.request.Request(
            env("LLM_URL") + "/completion",
            data=json.dumps({"prompt": prompt, "n_predict": n_predict, "cache_prompt": False}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.load(r)["timings"]

    long = complete(SYSTEM + "\n\n" + module(900) + repository(900), 1)
    usual = complete(SYSTEM + "\n\n" + module(990), 64)
    print(json.dumps({"long_prompt_ms": long["prompt_ms"], "decode_ms_per_token": usual["predicted_per_token_ms"]}))


def driver():
    """The load, in phases; every request through the gateway.

    - warmup: sequential requests of the usual shape (the slots' caches,
      the baselines: 20 samples each, fed as each second's kept traces are
      analysed, so twice that leaves no healthy request at the edge);
    - healthy: the same, judged;
    - long: sessions that send the whole repository (about 9,000 tokens);
    - miss: client 2.0, whose system prompt starts with the time;
    - burst: eight requests at once on two slots, 64 tokens each;
    - limited: one client over its rate limit at the gateway;
    - timeout: answers of TIMEOUT_TOKENS tokens (the test sets it from
      `calibrate`), longer than the gateway waits (one at a time, each
      until llama.cpp is idle again);
    - hog: CPU hogs on every core while usual requests go on.
    """
    from opentelemetry import trace

    provider = tracing()
    tracer = trace.get_tracer("driver")
    gateway = env("GATEWAY")
    scale = int(os.environ.get("SCALE", "1"))
    one = sender(tracer, gateway)

    def idle():
        """Until llama.cpp has no request in a slot or waiting for one
        (its own gauges): the next phase starts on an idle server."""
        while True:
            with urllib.request.urlopen(env("LLM_URL") + "/metrics", timeout=10) as r:
                m = dict(
                    line.rsplit(" ", 1) for line in r.read().decode().splitlines() if line and not line.startswith("#")
                )
            if float(m["llamacpp:requests_processing"]) == 0 and float(m["llamacpp:requests_deferred"]) == 0:
                return
            time.sleep(0.2)

    def burst(phase, k, body):
        threads = [threading.Thread(target=one, args=(phase, body)) for _ in range(k)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    for _ in range(40):
        one("warmup", {})
    for _ in range(scale):
        for _ in range(24):
            one("healthy", {})
        for _ in range(6):
            one("long", {"repo": one.sent})
        for _ in range(4):
            one("healthy", {})
        for _ in range(7):
            one("miss", {"client": "2.0"})
        for _ in range(4):
            one("healthy", {})
        for _ in range(2):
            burst("burst", 8, {"max_tokens": 64})
        for _ in range(4):
            one("healthy", {})
        for _ in range(12):
            one("limited", {}, {"X-Client-Id": "batch-importer"})
        for _ in range(5):
            one("timeout", {"max_tokens": int(env("TIMEOUT_TOKENS"))})
            # The assistant goes on after the gateway gave up: wait for it.
            idle()
        for _ in range(4):
            one("healthy", {})
        hog(lambda: one("hog", {}))
        idle()
    provider.shutdown()


def pulse():
    """A pulse of long contexts on the route, at a steady rate of about 2.5
    requests a second: 110 usual requests (the route's normal), then for
    40 s one request in five sends a whole repository (sequentially: the
    rate drops to one a second meanwhile, as a client waiting on its long
    answers does), then usual requests until STOP_FILE exists (the test saw
    the incident resolve; at most 5 minutes)."""
    from opentelemetry import trace

    provider = tracing()
    tracer = trace.get_tracer("driver")
    gateway = env("GATEWAY")
    one = sender(tracer, gateway, pace=0.4)

    for _ in range(110):
        one("normal", {})
    t0 = time.monotonic()
    while time.monotonic() - t0 < 40:
        one("pulse-long", {"repo": one.sent})
        for _ in range(4):
            one("pulse", {})
    stop = env("STOP_FILE")
    t0 = time.monotonic()
    while not os.path.exists(stop) and time.monotonic() - t0 < 300:
        one("after", {})
    provider.shutdown()


def cpu_times():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]


def hog(send):
    """Six busy loops per core (the server's one thread gets a seventh of a
    core) for 36 s; usual requests meanwhile, from 11 s to 25 s: a whole
    `hostmetrics` interval (10 s) of hog before the first and after the
    last, so the host's readings around each are of the hog alone;
    /proc/stat's busy share over the hog recorded."""
    procs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(6 * os.cpu_count())]
    total0, idle0 = cpu_times()
    t0 = time.monotonic()
    try:
        time.sleep(11)
        while time.monotonic() - t0 < 25:
            send()
        time.sleep(max(36 - (time.monotonic() - t0), 0))
    finally:
        total1, idle1 = cpu_times()
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
    record(phase="hog", busy=1 - (idle1 - idle0) / max(total1 - total0, 1))


if __name__ == "__main__":
    role = sys.argv[1]
    if role == "assistant":
        assistant()
    elif role == "driver":
        driver()
    elif role == "pulse":
        pulse()
    elif role == "calibrate":
        calibrate()
    else:
        raise SystemExit(f"unknown role {role}")
