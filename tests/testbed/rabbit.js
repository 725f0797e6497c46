// Services that talk over RabbitMQ with amqplib, traced by the stock
// OpenTelemetry Node.js SDK and its amqplib instrumentation (nothing here
// adds a span or an attribute by hand), for tests/rabbitmq_e2e.rs:
//   node rabbit.js api            HTTP: GET /order/:id, /notify/:id, and
//                                 /order-async/:id, /notify-async/:id
//   node rabbit.js worker QUEUE   consumes QUEUE and answers each message
// Each HTTP request publishes to an exchange (`orders`, topic, key
// `order.created`; `notify`, direct, key `mail`) with a reply queue and waits
// for the answer at most REPLY_TIMEOUT_MS, then answers 200 or 504: a
// request-reply over a queue, as RPC over RabbitMQ is done (the -async
// routes publish the same way and answer at once). A request
// writes what it saw (trace id, route, status, ms) to TRUTH_FILE.
// AMQP_URL: the broker; WORK_MS: the worker's work per request.
'use strict';
require('./tracing.js');
const amqp = require('amqplib');
const fs = require('fs');
const { trace } = require('@opentelemetry/api');

const { role, env } = require('./bed.js');

async function topology(ch) {
  await ch.assertExchange('orders', 'topic', { durable: false });
  await ch.assertExchange('notify', 'direct', { durable: false });
  await ch.assertQueue('orders.created', { durable: false });
  await ch.assertQueue('mail', { durable: false });
  await ch.bindQueue('orders.created', 'orders', 'order.*');
  await ch.bindQueue('mail', 'notify', 'mail');
}

async function api() {
  const express = require('express');
  const conn = await amqp.connect(env('AMQP_URL'));
  const ch = await conn.createChannel();
  await topology(ch);
  const { queue: replies } = await ch.assertQueue('', { exclusive: true });
  const waiting = new Map();
  await ch.consume(
    replies,
    (msg) => {
      const done = waiting.get(msg.properties.correlationId);
      if (done) done(msg.content.toString());
    },
    { noAck: true }
  );
  const timeout = +(process.env.REPLY_TIMEOUT_MS || 1500);
  let n = 0;
  const call = (exchange, key, body) =>
    new Promise((resolve) => {
      const id = `${process.pid}-${++n}`;
      const timer = setTimeout(() => {
        waiting.delete(id);
        resolve(null);
      }, timeout);
      waiting.set(id, (answer) => {
        clearTimeout(timer);
        waiting.delete(id);
        resolve(answer);
      });
      ch.publish(exchange, key, Buffer.from(body), {
        correlationId: id,
        replyTo: replies,
        timestamp: Math.floor(Date.now() / 1000),
      });
    });
  const app = express();
  // `wait`: false publishes and answers at once (fire and forget).
  const route = (path, exchange, key, wait = true) =>
    app.get(path, async (req, res) => {
      const t0 = Date.now();
      let answer = 'sent';
      if (wait) {
        answer = await call(exchange, key, req.params.id);
      } else {
        ch.publish(exchange, key, Buffer.from(req.params.id), {
          timestamp: Math.floor(Date.now() / 1000),
        });
      }
      const status = answer === null ? 504 : 200;
      // Written before the answer, so that it is there when the caller reads it.
      const span = trace.getActiveSpan();
      fs.appendFileSync(
        env('TRUTH_FILE'),
        JSON.stringify({
          trace_id: span ? span.spanContext().traceId : null,
          route: path,
          status,
          ms: Date.now() - t0,
        }) + '\n'
      );
      res.status(status).json({ answer });
    });
  route('/order/:id', 'orders', 'order.created');
  route('/notify/:id', 'notify', 'mail');
  route('/order-async/:id', 'orders', 'order.created', false);
  route('/notify-async/:id', 'notify', 'mail', false);
  app.listen(+env('PORT'), '127.0.0.1', () => console.log('ready'));
}

async function worker(queue) {
  const conn = await amqp.connect(env('AMQP_URL'));
  const ch = await conn.createChannel();
  await topology(ch);
  const work = +(process.env.WORK_MS || 10);
  // A request waiting for its answer takes WORK_MS of work; a message
  // nobody waits for is only recorded.
  await ch.consume(queue, (msg) => {
    const reply = msg.properties.replyTo;
    if (!reply) return ch.ack(msg);
    setTimeout(() => {
      ch.sendToQueue(reply, Buffer.from(`done ${msg.content}`), {
        correlationId: msg.properties.correlationId,
      });
      ch.ack(msg);
    }, work);
  });
  console.log('ready');
}

(role === 'api' ? api() : worker(process.argv[3])).catch((e) => {
  console.error(e);
  process.exit(1);
});
