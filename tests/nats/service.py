"""A NATS JetStream service for tests/nats_e2e.rs, traced by the stock
OpenTelemetry Python SDK and PyPI's otel-instrumentation-nats (nats-py),
exporting OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT.

  service.py worker SUBJECT DURABLE
      Consumes SUBJECT from the stream ORDERS (subjects orders.>) with a
      durable push consumer DURABLE, WORK_MS per message, acknowledging
      each; says `ready` once subscribed. Writes {"trace_id", "consumed"}
      to TRUTH_FILE per message.
  service.py publish SUBJECT N
      N requests, one after the other: a server span `POST /orders` that
      publishes one message to SUBJECT through JetStream. Writes
      {"trace_id", "published", "phase": PHASE} to TRUTH_FILE per request;
      says `done` once its spans are exported.
"""

import asyncio
import json
import os
import signal
import sys

import nats
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind
from otel_instrumentation_nats import NatsInstrumentor

provider = TracerProvider(
    resource=Resource.create({"service.name": os.environ["OTEL_SERVICE_NAME"]})
)
provider.add_span_processor(
    BatchSpanProcessor(
        OTLPSpanExporter(endpoint=os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] + "/v1/traces"),
        schedule_delay_millis=200,
    )
)
trace.set_tracer_provider(provider)
NatsInstrumentor().instrument()
tracer = trace.get_tracer("nats-test-service")


def truth(record):
    with open(os.environ["TRUTH_FILE"], "a") as f:
        f.write(json.dumps(record) + "\n")


def trace_id():
    return format(trace.get_current_span().get_span_context().trace_id, "032x")


async def stream(js):
    try:
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
    except Exception:
        pass  # it exists


async def worker(subject, durable):
    nc = await nats.connect(os.environ["NATS_URL"])
    js = nc.jetstream()
    await stream(js)
    work = int(os.environ.get("WORK_MS", "10")) / 1000.0

    async def handle(msg):
        with tracer.start_as_current_span("process order"):
            await asyncio.sleep(work)
        await msg.ack()
        truth({"trace_id": trace_id(), "consumed": True})

    await js.subscribe(subject, durable=durable, cb=handle, manual_ack=True)
    print("ready", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await nc.close()


async def publish(subject, n):
    nc = await nats.connect(os.environ["NATS_URL"])
    js = nc.jetstream()
    await stream(js)
    for _ in range(n):
        with tracer.start_as_current_span(
            "POST /orders",
            kind=SpanKind.SERVER,
            attributes={"http.route": "/orders", "http.request.method": "POST"},
        ):
            await js.publish(subject, b"order")
            truth({"trace_id": trace_id(), "published": True, "phase": os.environ.get("PHASE", "")})
    await nc.close()
    provider.force_flush()
    print("done", flush=True)


def main():
    mode, subject = sys.argv[1], sys.argv[2]
    try:
        if mode == "worker":
            asyncio.run(worker(subject, sys.argv[3]))
        else:
            asyncio.run(publish(subject, int(sys.argv[3])))
    finally:
        provider.shutdown()


main()
