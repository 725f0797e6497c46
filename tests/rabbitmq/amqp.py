#!/usr/bin/python3
"""A real AMQP 0-9-1 client (Debian's python3-pika) for tests/rabbitmq_e2e.rs.

    amqp.py <port> publish <queue> <n> [per_second]   declare, publish n (timestamped), exit
    amqp.py <port> get <queue> <n>                     take and ack n, exit
    amqp.py <port> hold <queue> <prefetch>             consume, never ack (a stuck consumer)
    amqp.py <port> slow <queue> <per_second>           consume and ack slowly
Prints "ready" once connected (and consuming, for hold and slow).
"""
import sys
import time

import pika

port, cmd, queue = int(sys.argv[1]), sys.argv[2], sys.argv[3]
arg = float(sys.argv[4])
conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, heartbeat=0))
ch = conn.channel()
ch.queue_declare(queue=queue)
if cmd == "publish":
    rate = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    print("ready", flush=True)
    for i in range(int(arg)):
        ch.basic_publish(
            exchange="",
            routing_key=queue,
            body=b"m%d" % i,
            properties=pika.BasicProperties(timestamp=int(time.time())),
        )
        if rate:
            time.sleep(1.0 / rate)
elif cmd == "get":
    print("ready", flush=True)
    for _ in range(int(arg)):
        method, _, _ = ch.basic_get(queue=queue, auto_ack=False)
        if method is None:
            sys.exit("the queue ran dry")
        ch.basic_ack(method.delivery_tag)
elif cmd in ("hold", "slow"):
    if cmd == "hold":
        ch.basic_qos(prefetch_count=int(arg))
        ch.basic_consume(queue=queue, on_message_callback=lambda *a: None)
    else:
        ch.basic_qos(prefetch_count=1)

        def on(c, method, props, body):
            time.sleep(1.0 / arg)
            c.basic_ack(method.delivery_tag)

        ch.basic_consume(queue=queue, on_message_callback=on)
    print("ready", flush=True)
    ch.start_consuming()
else:
    sys.exit("unknown command " + cmd)
conn.close()
