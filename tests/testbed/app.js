// The test bed's services and its load driver, one role per process:
//   node app.js shop|pricing|billing|driver
// Faults are caused by real mechanisms in real software (a cold Redis cache
// falling back to a slow PostgreSQL query, a one-connection pg pool under a
// burst, NGINX's limit_req, proxy_read_timeout and a dead upstream, a thrown
// exception). Ground truth is what the driver and the services observed,
// written per trace id to TRUTH_FILE; no span attribute is added by hand.
'use strict';
const sdk = require('./tracing.js');
const http = require('http');
const { trace } = require('@opentelemetry/api');

const { role, env, record, sleep, finish } = require('./bed.js');
const kafka = () => {
  const { Kafka, logLevel } = require('kafkajs');
  return new Kafka({ clientId: role, brokers: [env('KAFKA')], logLevel: logLevel.ERROR });
};

if (role === 'shop') {
  const express = require('express');
  const Redis = require('ioredis');
  const { Pool } = require('pg');
  const db = { host: '127.0.0.1', port: +env('PG_PORT'), user: 'postgres', database: 'postgres' };
  const pg = new Pool({ ...db, max: 8 });
  // The orders endpoint's pool has one connection: a burst queues on it.
  const narrow = new Pool({ ...db, max: 1 });
  const redis = new Redis({ host: '127.0.0.1', port: +env('REDIS_PORT') });
  const app = express();
  // Cache-aside: GET, on a miss a slow query, then SET.
  app.get('/item/:id', async (req, res) => {
    const key = `item:${req.params.id}`;
    let v = await redis.get(key);
    if (v === null) {
      const r = await pg.query('SELECT pg_sleep(0.4), $1::text AS id', [req.params.id]);
      v = JSON.stringify(r.rows[0]);
      await redis.set(key, v, 'EX', 600);
    }
    res.json({ item: v });
  });
  // A plain read of a small table; the driver locks the table at times.
  app.get('/stock/:id', async (req, res) => {
    const r = await pg.query('SELECT qty FROM stock WHERE id = $1', [+req.params.id]);
    res.json({ qty: r.rows.length ? r.rows[0].qty : null });
  });
  app.get('/orders', async (req, res) => {
    const t0 = Date.now();
    const client = await narrow.connect();
    const waited = Date.now() - t0;
    try {
      await client.query('SELECT pg_sleep(0.1)');
    } finally {
      client.release();
    }
    record({ trace_id: trace.getActiveSpan().spanContext().traceId, pool_wait_ms: waited });
    res.json({ waited });
  });
  // A report from pricing, which takes 3 s; the shop says how long it
  // waited (ground truth of a timeout: longer than NGINX's 1 s).
  app.get('/report', (req, res) => {
    const traceId = trace.getActiveSpan().spanContext().traceId;
    const t0 = Date.now();
    http
      .get(`http://127.0.0.1:${env('PRICING_PORT')}/slow?ms=3000`, (r) => {
        r.resume();
        r.on('end', () => {
          record({ trace_id: traceId, report_ms: Date.now() - t0 });
          res.json({ ok: true });
        });
      })
      .on('error', () => res.status(502).end());
  });
  // A price through a breaker from npm's brakes, told to judge after 5
  // calls (its default waits for 100). The truth is what the breaker did:
  // its own CircuitBrokenError (no call made), or the call's failure.
  const Brakes = require('brakes');
  const CircuitBrokenError = require('brakes/lib/CircuitBrokenError');
  const priceCall = () =>
    new Promise((resolve, reject) => {
      http
        .get(`http://127.0.0.1:${env('PRICING_PORT')}/busy`, (r) => {
          r.resume();
          r.on('end', () => (r.statusCode === 200 ? resolve() : reject(new Error(`pricing answered ${r.statusCode}`))));
        })
        .on('error', reject);
    });
  const guarded = new Brakes(priceCall, { name: 'pricing', waitThreshold: 5 });
  app.get('/guarded', async (req, res) => {
    const traceId = trace.getActiveSpan().spanContext().traceId;
    try {
      await guarded.exec();
      res.json({ ok: true });
    } catch (e) {
      record({ trace_id: traceId, observed: e instanceof CircuitBrokenError ? 'circuit_open' : 'upstream_unavailable' });
      res.status(503).end();
    }
  });
  app.get('/fail', () => {
    throw new Error('order.customer is null');
  });
  // A quote from pricing, whose event loop a burst keeps busy: the
  // requests wait in its accept queue. Pricing says when its handler took
  // each (the same machine's clock): from the call to then, the request
  // waited to be taken (what comes after, the answer's way back through a
  // busy shop, is no wait in pricing). Each handles in 40 ms: the first of
  // a burst is a healthy request, and its handler stays under the 50 ms a
  // cause must explain even on a busy machine (45 ms crossed it there,
  // with no baseline for the handler yet).
  app.get('/quote', (req, res) => {
    const traceId = trace.getActiveSpan().spanContext().traceId;
    const t0 = Date.now();
    http
      .get(`http://127.0.0.1:${env('PRICING_PORT')}/spin?ms=40`, (r) => {
        const taken = +r.headers['x-started-ms'];
        r.resume();
        r.on('end', () => {
          record({ trace_id: traceId, accept_wait_ms: taken - t0 });
          res.json({ ok: true });
        });
      })
      .on('error', () => res.status(502).end());
  });
  // Each request the shop served, so a request the gateway turned away is
  // known by its absence here, not by the status the gateway logged.
  app.get('/ok', async (req, res) => {
    record({ trace_id: trace.getActiveSpan().spanContext().traceId, served: '/ok' });
    await pg.query('SELECT 1');
    res.json({ ok: true });
  });
  // An order is published to Kafka; `billing` consumes it.
  const producer = kafka().producer();
  app.get('/order', async (req, res) => {
    await producer.send({ topic: 'orders', messages: [{ value: 'order' }] });
    res.json({ queued: true });
  });
  pg.query('CREATE TABLE IF NOT EXISTS stock (id int PRIMARY KEY, qty int)')
    .then(() => pg.query('INSERT INTO stock SELECT g, 10 FROM generate_series(1, 100) g ON CONFLICT DO NOTHING'))
    .then(() => producer.connect())
    .then(() => app.listen(+env('PORT'), '127.0.0.1', () => console.log('ready')));
} else if (role === 'billing') {
  // The consumer group `billing`; the driver pauses and resumes it (a
  // consumer that stops fetching: its group's lag grows).
  // A short fetch wait: a resumed consumer fetches again within 100 ms.
  const consumer = kafka().consumer({ groupId: 'billing', maxWaitTimeInMs: 100 });
  const app = require('express')();
  app.get('/pause', (req, res) => {
    consumer.pause([{ topic: 'orders' }]);
    res.json({ paused: true });
  });
  app.get('/resume', (req, res) => {
    consumer.resume([{ topic: 'orders' }]);
    res.json({ paused: false });
  });
  (async () => {
    await consumer.connect();
    await consumer.subscribe({ topic: 'orders', fromBeginning: true });
    await consumer.run({
      // The wait each message had, from its produce timestamp (ground truth).
      eachMessage: async ({ message }) => {
        const waited = Date.now() - Number(message.timestamp);
        // The trace the message belongs to, from the traceparent the producer sent.
        const tp = String((message.headers || {}).traceparent || '');
        const traceId = tp.split('-')[1];
        if (traceId) record({ trace_id: traceId, consume_wait_ms: waited });
        await sleep(5);
      },
    });
    app.listen(+env('PORT'), '127.0.0.1', () => console.log('ready'));
  })();
} else if (role === 'pricing') {
  const express = require('express');
  const app = express();
  app.get('/slow', async (req, res) => {
    await sleep(+req.query.ms || 0);
    res.json({ price: 42 });
  });
  // CPU work that holds the event loop: requests behind it wait unaccepted.
  app.get('/spin', (req, res) => {
    const t0 = Date.now();
    while (Date.now() - t0 < (+req.query.ms || 0)) {
      // busy
    }
    res.set('x-handled-ms', String(Date.now() - t0));
    res.set('x-started-ms', String(t0));
    res.json({ price: 42 });
  });
  // Draining (as a server does before a restart): 503 until the time is up.
  let drainUntil = 0;
  app.get('/drain', (req, res) => {
    drainUntil = Date.now() + (+req.query.ms || 0);
    res.json({ draining: true });
  });
  app.get('/busy', (req, res) => {
    if (Date.now() < drainUntil) res.status(503).end();
    else res.json({ price: 42 });
  });
  // A price that takes 400 ms: longer than the hammering client waits.
  app.get('/hammer', async (req, res) => {
    await sleep(400);
    res.json({ price: 42 });
  });
  app.listen(+env('PORT'), '127.0.0.1', () => console.log('ready'));
} else if (role === 'driver') {
  const tracer = trace.getTracer('load-driver');
  const base = env('GATEWAY');
  // The status NGINX answered; 0 when the request failed or was given up
  // after `timeout` ms.
  const get = (path, timeout) =>
    new Promise((resolve) => {
      const req = http.get(`${base}${path}`, { agent: false }, (r) => {
        r.resume();
        r.on('end', () => resolve(r.statusCode));
      });
      if (timeout) req.setTimeout(timeout, () => req.destroy(new Error(`attempt timed out after ${timeout} ms`)));
      req.on('error', () => resolve(0));
    });
  // One request in its own trace; the label is what the fault was, by what
  // the driver saw (the status NGINX answered) or caused (a cold key).
  const one = (path, label) =>
    tracer.startActiveSpan('request', async (span) => {
      const status = await get(path);
      span.end();
      record({ trace_id: span.spanContext().traceId, path, status, label: label(status) });
    });
  const many = (n, f) => Promise.all(Array.from({ length: n }, (_, i) => f(i)));
  // A client that retries until a 200, at most `tries` attempts, `backoff`
  // ms apart, each given up after `timeout` ms if set; the label is what
  // its attempts were answered.
  const retrying = (path, tries, backoff, label, timeout) =>
    tracer.startActiveSpan('request', async (span) => {
      const statuses = [];
      for (let i = 0; i < tries; i++) {
        if (i > 0) await sleep(backoff);
        const s = await get(path, timeout);
        statuses.push(s);
        if (s === 200) break;
      }
      span.end();
      record({ trace_id: span.spanContext().traceId, path, statuses, label: label(statuses) });
    });
  // Control calls to billing, untraced (not part of the load).
  const { context, ROOT_CONTEXT } = require('@opentelemetry/api');
  const { suppressTracing } = require('@opentelemetry/core');
  const control = (path, port = env('BILLING_PORT')) =>
    context.with(suppressTracing(context.active()), () =>
      new Promise((resolve) => {
        http
          .get(`http://127.0.0.1:${port}${path}`, { agent: false }, (r) => {
            r.resume();
            r.on('end', resolve);
          })
          .on('error', resolve);
      })
    );
  const scale = +(process.env.SCALE || 1);
  const run = Date.now().toString(36);
  (async () => {
    // Warm-up: fill the cache for the keys healthy requests read.
    for (let i = 0; i < 10; i++) await one(`/item/warm-${run}-${i}`, () => 'warmup');
    // The orders' query, seen as often as a baseline needs (20) before its
    // bursts: its span name (`pg.query:SELECT postgres`) is every SELECT's,
    // whose 1 ms is no normal for a 100 ms query.
    for (let i = 0; i < 20; i++) await one('/orders', () => 'warmup');
    // The item route's normal traffic, as production has it (WARMUP,
    // default none): behind a sampler that keeps each route's p99, the
    // cold reads below are its tail.
    for (let i = 0; i < +(process.env.WARMUP || 0); i++) await one(`/item/warm-${run}-${i % 10}`, () => 'warmup');
    for (let round = 0; round < scale; round++) {
      // Orders while billing consumes (first: its group commits an offset
      // before the pause below, so its lag is known).
      for (let i = 0; i < 5; i++) await one('/order', (s) => (s === 200 ? 'order' : `unexpected-${s}`));
      for (let i = 0; i < 20; i++) await one(`/item/warm-${run}-${i % 10}`, () => 'healthy');
      for (let i = 0; i < 15; i++) await one('/ok', () => 'healthy');
      for (let i = 0; i < 5; i++) await one('/guarded', () => 'healthy');
      // A cold cache: keys never read before.
      await many(4, async (w) => {
        for (let i = 0; i < 5; i++) await one(`/item/cold-${run}-${round}-${w}-${i}`, () => 'cache_miss_fallback');
      });
      for (let i = 0; i < 12; i++) await one('/fail', (s) => (s === 500 ? 'error' : `unexpected-${s}`));
      // A route to a port nothing listens on: unavailable by construction.
      for (let i = 0; i < 12; i++) await one('/dead', () => 'upstream_unavailable');
      // Reports outlive NGINX's 1 s read timeout: the shop's own wait says so.
      await many(10, () => one('/report', () => 'report'));
      // limit_req: bursts over the rate; the ones the shop never served
      // were turned away by the limit.
      for (let b = 0; b < 3; b++) {
        await many(8, () => one('/limited', () => 'limited'));
        await sleep(1200);
      }
      // A client that waits 650 ms after a 429 and tries up to 5 times (at
      // 2 requests a second, six at once: the last ones make all 5, 4
      // answered 429, as #49's mobile-bff did): the limit is the cause, its
      // retries are what the limit caused.
      for (let b = 0; b < 3; b++) {
        await many(6, () => retrying('/limited2', 5, 650, () => 'limited'));
        await sleep(1200);
      }
      // A client hammering a draining server: 100 ms apart until it
      // answers. The drain (unavailable) is what its retries answered.
      for (let b = 0; b < 6; b++) {
        await control('/drain?ms=700', env('PRICING_PORT'));
        await retrying('/busy', 12, 100, (st) =>
          st.length >= 5 && st.includes(503) ? 'upstream_unavailable' : st.includes(503) ? 'ambiguous' : 'healthy'
        );
      }
      // A price through shop's breaker while pricing drains for 20 s: the
      // calls fail until the breaker has seen enough of them, then it
      // refuses them without calling (the shop records which).
      await control('/drain?ms=20000', env('PRICING_PORT'));
      for (let i = 0; i < 30; i++) {
        await one('/guarded', () => 'observed');
        await sleep(100);
      }
      // One client giving each attempt 60 ms against a price that takes
      // 400, retrying 50 ms later: its own attempts are the truth (six or
      // more, each given up). One request's retries, however fast, are a
      // transient failure retried: the timeout is the cause.
      for (let b = 0; b < 6; b++) {
        await retrying('/hammer', 8, 50, (st) => (st.length >= 6 && st.every((s) => s === 0) ? 'upstream_timeout' : 'ambiguous'), 60);
      }
      // Bursts on pricing's busy event loop: the later requests of each
      // burst wait in its accept queue (the shop records each wait).
      for (let b = 0; b < 3; b++) {
        await many(8, () => one('/quote', () => 'accept'));
        await sleep(300);
      }
      // Stock reads: fast, then behind a table lock. The driver takes an
      // ACCESS EXCLUSIVE lock on the table in a transaction of its own
      // (untraced), reads while it holds it, and commits 2.5 s later: the
      // reads made meanwhile waited on the lock.
      for (let i = 0; i < 10; i++) await one(`/stock/${i + 1}`, () => 'healthy');
      await context.with(suppressTracing(context.active()), async () => {
        const { Client } = require('pg');
        const c = new Client({ host: '127.0.0.1', port: +env('PG_PORT'), user: 'postgres', database: 'postgres' });
        await c.connect();
        await c.query('BEGIN');
        await c.query('LOCK TABLE stock IN ACCESS EXCLUSIVE MODE');
        const reads = context.with(ROOT_CONTEXT, () =>
          many(5, (i) => one(`/stock/${i + 20}`, () => 'db_lock_contention'))
        );
        await sleep(2500);
        await c.query('COMMIT');
        await c.end();
        await reads;
      });
      // A burst on the one-connection pool; the shop records each wait.
      for (let b = 0; b < 3; b++) {
        await many(6, () => one('/orders', () => 'pool'));
        await sleep(300);
      }
      // Orders while billing is paused: they wait in the topic until it
      // resumes (a stopped consumer, real lag). A short pause, whose
      // consumer spans mostly arrive before the sampler decides, then a
      // long one, whose consumer spans arrive after their traces were
      // analysed (decision_wait + evidence_wait is 11 s in the test).
      for (const [orders, pause] of [[4, 1000], [6, 12000]]) {
        await control('/pause');
        for (let i = 0; i < orders; i++) {
          await one('/order', (s) => (s === 200 ? 'order' : `unexpected-${s}`));
          await sleep(250);
        }
        await sleep(pause);
        await control('/resume');
        await sleep(1500);
      }
    }
    await sdk.shutdown();
    finish();
  })();
} else {
  throw new Error(`unknown role ${role}`);
}
