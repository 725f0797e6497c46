#!/usr/bin/env python3
"""Prometheus targets for bench/prometheus_scrape.sh: N listening ports on
127.0.0.1, each serving a node_exporter-shaped exposition of S series
(gauges and counters with a few labels, and histograms), values changing on
every scrape. Prints the first port, then serves until killed.

    prom_targets.py <first_port> <targets> <series>
"""
import asyncio
import random
import sys

FIRST, N, SERIES = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])


def body(seed: int, scrape: int) -> bytes:
    rng = random.Random(seed)
    lines = []
    n = 0
    fam = 0
    # A histogram family of 10 buckets per label set: 13 series each.
    while n < SERIES // 4:
        name = f"bench_request_duration_seconds_{fam}"
        lines.append(f"# HELP {name} Request latency.\n# TYPE {name} histogram\n")
        for h in range(5):
            count = 0
            for le in (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5):
                count += rng.randint(0, 50) + scrape
                lines.append(f'{name}_bucket{{handler="/api/{h}",le="{le}"}} {count}\n')
            lines.append(f'{name}_bucket{{handler="/api/{h}",le="+Inf"}} {count}\n')
            lines.append(f'{name}_sum{{handler="/api/{h}"}} {count * 0.07:.3f}\n')
            lines.append(f'{name}_count{{handler="/api/{h}"}} {count}\n')
            n += 13
        fam += 1
    while n < SERIES:
        kind = "counter" if fam % 2 else "gauge"
        name = f"bench_{kind}_{fam}" + ("_total" if kind == "counter" else "")
        lines.append(f"# HELP {name} A {kind}.\n# TYPE {name} {kind}\n")
        for i in range(20):
            v = rng.random() * 1000 + (scrape * 10 if kind == "counter" else 0)
            lines.append(f'{name}{{device="sd{i % 4}",mode="m{i}",cpu="{i % 8}"}} {v:.3f}\n')
            n += 1
            if n >= SERIES:
                break
        fam += 1
    return "".join(lines).encode()


async def main():
    scrapes = {}

    async def handle(reader, writer, port):
        try:
            # Keep-alive: every request on the connection is served.
            while True:
                await reader.readuntil(b"\r\n\r\n")
                k = scrapes.get(port, 0)
                scrapes[port] = k + 1
                b = body(port, k)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                    + f"Content-Length: {len(b)}\r\nConnection: keep-alive\r\n\r\n".encode()
                    + b
                )
                await writer.drain()
        except Exception:
            pass
        finally:
            writer.close()

    servers = []
    for p in range(FIRST, FIRST + N):
        servers.append(
            await asyncio.start_server(lambda r, w, p=p: handle(r, w, p), "127.0.0.1", p)
        )
    print(FIRST, flush=True)
    await asyncio.Event().wait()


asyncio.run(main())
