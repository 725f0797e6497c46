// The incident test bed's services and load driver, one role per process:
//   node incident.js catalog|driver
// `catalog` runs in two versions side by side (OTEL_RESOURCE_ATTRIBUTES
// service.version=2.4.0 and 2.4.1). 2.4.1 has a cache-key bug: its key
// carries the request id, so every lookup misses the warm Redis cache and
// falls back to a slow PostgreSQL read. NGINX sends the requests that carry
// `x-canary: 1` to 2.4.1; the driver sends most of them there for a minute
// (a canary rollout), and rate-limits itself out on /search meanwhile.
// Ground truth is what the services observed, per trace id, in TRUTH_FILE:
// the catalog's version and whether Redis answered the lookup; the driver's
// phase of each request and when it sent it and had its answer. No span attribute is added by hand.
'use strict';
const sdk = require('./tracing.js');
const http = require('http');
const { trace } = require('@opentelemetry/api');

const { role, env, record, sleep, finish } = require('./bed.js');
const traceId = () => trace.getActiveSpan().spanContext().traceId;

if (role === 'catalog') {
  const express = require('express');
  const Redis = require('ioredis');
  const { Pool } = require('pg');
  const version = env('VERSION');
  const keyBug = process.env.CACHE_KEY_BUG === '1';
  const pg = new Pool({ host: '127.0.0.1', port: +env('PG_PORT'), user: 'postgres', database: 'postgres', max: 32 });
  const redis = new Redis({ host: '127.0.0.1', port: +env('REDIS_PORT') });
  const app = express();
  // An item: its stock read live (every request), its details cache-aside
  // (GET; on a miss a slow read, then SET).
  app.get('/item/:id', async (req, res) => {
    await pg.query('SELECT $1::int AS qty', [+req.params.id || 0]);
    // The bug: the request id in the key (a key nobody ever wrote).
    const key = keyBug ? `item:${req.params.id}:${req.headers['x-request-id']}` : `item:${req.params.id}`;
    let v = await redis.get(key);
    const hit = v !== null;
    if (!hit) {
      const r = await pg.query('SELECT pg_sleep(0.4), $1::text AS id', [req.params.id]);
      v = JSON.stringify(r.rows[0]);
      await redis.set(key, v, 'EX', 600);
    }
    record({ trace_id: traceId(), version, cache: hit ? 'hit' : 'miss' });
    res.json({ item: v });
  });
  // A report: slow by nature (1.5 s, always).
  app.get('/report', async (req, res) => {
    await sleep(1500);
    res.json({ ok: true });
  });
  // A search; the gateway rate-limits it. Each request served is recorded,
  // so one the limit turned away is known by its absence here.
  app.get('/search', (req, res) => {
    record({ trace_id: traceId(), served: 'search' });
    res.json({ hits: [] });
  });
  app.listen(+env('PORT'), '127.0.0.1', () => console.log('ready'));
} else if (role === 'driver') {
  const tracer = trace.getTracer('load-driver');
  const base = env('GATEWAY');
  let seq = 0;
  const get = (path, headers) =>
    new Promise((resolve) => {
      const req = http.get(`${base}${path}`, { agent: false, headers }, (r) => {
        r.resume();
        r.on('end', () => resolve(r.statusCode));
      });
      req.on('error', () => resolve(0));
    });
  let phase = 'warmup';
  // `start` and `t` are when the driver sent the request and had its answer.
  const one = (path, headers = {}) => {
    const start = Date.now();
    return tracer.startActiveSpan('request', async (span) => {
      const status = await get(path, { 'x-request-id': `r${++seq}`, ...headers });
      span.end();
      record({ trace_id: span.spanContext().traceId, path, status, phase, start, t: Date.now() });
    });
  };
  // `n` requests a second of `f` until `until()` is false, each in flight on its own.
  const rate = async (n, until, f) => {
    const every = 1000 / n;
    let next = Date.now();
    const inflight = new Set();
    while (until()) {
      const p = f().finally(() => inflight.delete(p));
      inflight.add(p);
      next += every;
      await sleep(Math.max(0, next - Date.now()));
    }
    await Promise.all(inflight);
  };
  const healthyS = +env('HEALTHY_S');
  const faultS = +env('FAULT_S');
  const afterS = +env('AFTER_S');
  (async () => {
    for (let i = 0; i < 20; i++) await one(`/item/${i}`);
    phase = 'healthy';
    const t0 = Date.now();
    const faultFrom = t0 + healthyS * 1000;
    const faultTo = faultFrom + faultS * 1000;
    const end = faultTo + afterS * 1000;
    const inFault = () => Date.now() >= faultFrom && Date.now() < faultTo;
    const ticker = setInterval(() => {
      const now = Date.now();
      phase = now < faultFrom ? 'healthy' : now < faultTo ? 'fault' : 'after';
    }, 50);
    let k = 0;
    await Promise.all([
      // Items: 15 a second; during the fault 80% go to the canary.
      rate(15, () => Date.now() < end, () => {
        k++;
        const canary = inFault() && k % 5 !== 0;
        return one(`/item/${k % 20}`, canary ? { 'x-canary': '1' } : {});
      }),
      // Reports: 3 a second, slow by nature.
      rate(3, () => Date.now() < end, () => one('/report')),
      // Searches: 6 a second, 40 a second during the fault (the limit is 10).
      rate(6, () => Date.now() < faultFrom, () => one('/search')),
      (async () => {
        await sleep(Math.max(0, faultFrom - Date.now()));
        // Until the fault's end, not `inFault`: a timer may fire a
        // millisecond early, and the fault's searches would never start.
        await rate(40, () => Date.now() < faultTo, () => one('/search'));
        await rate(6, () => Date.now() < end, () => one('/search'));
      })(),
    ]);
    clearInterval(ticker);
    await sdk.shutdown();
    finish();
  })();
} else {
  throw new Error(`unknown role ${role}`);
}
