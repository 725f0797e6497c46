// The Java side of the polyglot root-cause test bed (tests/rca_testbed_polyglot.rs),
// one role per JVM:
//
//   java -javaagent:opentelemetry-javaagent.jar -cp ... Main orders|billing
//
// Instrumented by the OpenTelemetry Java agent alone (the JDK HTTP server,
// grpc-java, JDBC, Lettuce, the Kafka clients); no span attribute is added
// by hand. The faults are real mechanisms: a gRPC deadline, resilience4j's
// circuit breaker opening over a stopped server, a row lock, a dropped
// index, a draining endpoint, a paused Kafka consumer. Ground truth is what
// the mechanism observed, one JSON line per trace id appended to TRUTH_FILE
// (the trace id read from the request's or the record's traceparent).

import com.alibaba.csp.sentinel.Entry;
import com.alibaba.csp.sentinel.SphU;
import com.alibaba.csp.sentinel.slots.block.BlockException;
import com.alibaba.csp.sentinel.slots.block.RuleConstant;
import com.alibaba.csp.sentinel.slots.block.degrade.DegradeRule;
import com.alibaba.csp.sentinel.slots.block.degrade.DegradeRuleManager;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.github.resilience4j.circuitbreaker.CallNotPermittedException;
import io.github.resilience4j.circuitbreaker.CircuitBreaker;
import io.github.resilience4j.circuitbreaker.CircuitBreakerConfig;
import io.github.resilience4j.retry.Retry;
import io.github.resilience4j.retry.RetryConfig;
import io.grpc.CallOptions;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.InsecureServerCredentials;
import io.grpc.ManagedChannel;
import io.grpc.MethodDescriptor;
import io.grpc.ServerServiceDefinition;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.ClientCalls;
import io.grpc.stub.ServerCalls;
import io.lettuce.core.RedisClient;
import io.lettuce.core.api.sync.RedisCommands;
import java.io.ByteArrayInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class Main {
  interface Handler {
    String handle(HttpExchange ex) throws Exception;
  }

  static String env(String k) {
    String v = System.getenv(k);
    if (v == null || v.isEmpty()) throw new IllegalStateException(k + " is not set");
    return v;
  }

  static FileOutputStream truth;

  static synchronized void record(String traceId, String observed, String more) {
    String line = "{\"trace_id\":\"" + traceId + "\",\"observed\":\"" + observed + "\"" + more + "}\n";
    try {
      truth.write(line.getBytes(StandardCharsets.UTF_8));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  static String traceIdOf(String traceparent) {
    if (traceparent == null) return "";
    String[] p = traceparent.split("-");
    return p.length > 1 ? p[1] : "";
  }

  static String traceId(HttpExchange ex) {
    return traceIdOf(ex.getRequestHeaders().getFirst("traceparent"));
  }

  static String query(HttpExchange ex, String key, String dflt) {
    String q = ex.getRequestURI().getQuery();
    if (q != null) {
      for (String kv : q.split("&")) {
        String[] p = kv.split("=", 2);
        if (p[0].equals(key) && p.length == 2) return p[1];
      }
    }
    return dflt;
  }

  static void respond(HttpExchange ex, int status, String body) throws IOException {
    byte[] b = body.getBytes(StandardCharsets.UTF_8);
    ex.sendResponseHeaders(status, b.length);
    try (OutputStream o = ex.getResponseBody()) {
      o.write(b);
    }
  }

  // A route: a thrown exception answers 500 and propagates, so the agent's
  // server span records it as any unhandled exception is.
  static void route(HttpServer s, String path, Handler h) {
    s.createContext(
        path,
        ex -> {
          String body;
          try {
            body = h.handle(ex);
          } catch (RuntimeException e) {
            respond(ex, 500, e.toString());
            throw e;
          } catch (Exception e) {
            respond(ex, 500, e.toString());
            throw new RuntimeException(e);
          }
          if (body == null) respond(ex, 503, "draining");
          else respond(ex, 200, body);
        });
  }

  static final MethodDescriptor.Marshaller<byte[]> BYTES =
      new MethodDescriptor.Marshaller<>() {
        @Override
        public InputStream stream(byte[] v) {
          return new ByteArrayInputStream(v);
        }

        @Override
        public byte[] parse(InputStream in) {
          try {
            return in.readAllBytes();
          } catch (IOException e) {
            throw new UncheckedIOException(e);
          }
        }
      };

  static MethodDescriptor<byte[], byte[]> unary(String service, String method) {
    return MethodDescriptor.<byte[], byte[]>newBuilder()
        .setType(MethodDescriptor.MethodType.UNARY)
        .setFullMethodName(MethodDescriptor.generateFullMethodName(service, method))
        .setRequestMarshaller(BYTES)
        .setResponseMarshaller(BYTES)
        .build();
  }

  static ManagedChannel channel(String addr) {
    return Grpc.newChannelBuilder(addr, InsecureChannelCredentials.create()).build();
  }

  public static void main(String[] args) throws Exception {
    truth = new FileOutputStream(env("TRUTH_FILE"), true);
    switch (args.length > 0 ? args[0] : "") {
      case "orders" -> orders();
      case "billing" -> billing();
      default -> throw new IllegalArgumentException("usage: Main orders|billing");
    }
  }

  static void orders() throws Exception {
    HikariConfig hc = new HikariConfig();
    hc.setJdbcUrl(env("PG_URL"));
    hc.setMaximumPoolSize(8);
    HikariDataSource db = new HikariDataSource(hc);
    RedisClient redisClient = RedisClient.create(env("REDIS_URL"));
    RedisCommands<String, String> redis = redisClient.connect().sync();
    Properties pp = new Properties();
    pp.put("bootstrap.servers", env("KAFKA"));
    pp.put("key.serializer", StringSerializer.class.getName());
    pp.put("value.serializer", StringSerializer.class.getName());
    pp.put("linger.ms", "0");
    KafkaProducer<String, String> producer = new KafkaProducer<>(pp);

    ManagedChannel inventory = channel(env("INVENTORY_ADDR"));
    ManagedChannel reservations = channel(env("RESERVATIONS_ADDR"));
    MethodDescriptor<byte[], byte[]> quote = unary("inventory.Stock", "Quote");
    MethodDescriptor<byte[], byte[]> reserve = unary("inventory.Stock", "Reserve");
    // The breaker guarding the reservations service, named after it as
    // resilience4j's instances are: it opens when the last 16 calls all
    // failed, and lets one call through after 2 s. Around it, resilience4j's
    // Retry: three attempts 100 ms apart, none once the breaker refuses.
    CircuitBreaker breaker =
        CircuitBreaker.of(
            "reservations",
            CircuitBreakerConfig.custom()
                .slidingWindowType(CircuitBreakerConfig.SlidingWindowType.COUNT_BASED)
                .slidingWindowSize(16)
                .minimumNumberOfCalls(16)
                .failureRateThreshold(100)
                .waitDurationInOpenState(Duration.ofSeconds(2))
                .permittedNumberOfCallsInHalfOpenState(1)
                .build());
    Retry retry =
        Retry.of(
            "reservations",
            RetryConfig.custom()
                .maxAttempts(3)
                .waitDuration(Duration.ofMillis(100))
                .ignoreExceptions(CallNotPermittedException.class)
                .build());
    AtomicLong drainUntil = new AtomicLong();
    // Alibaba's Sentinel guarding holds on the same reservations server: a
    // degrade rule (its circuit breaker) that opens after 3 errors in its
    // 1 s window, for 10 s. Its logs go to a directory of their own.
    System.setProperty("csp.sentinel.log.dir", System.getProperty("java.io.tmpdir") + "/sentinel-" + ProcessHandle.current().pid());
    DegradeRuleManager.loadRules(
        List.of(
            new DegradeRule("reservations-hold")
                .setGrade(RuleConstant.DEGRADE_GRADE_EXCEPTION_COUNT)
                .setCount(3)
                .setMinRequestAmount(3)
                .setTimeWindow(10)));

    HttpServer s = HttpServer.create(new InetSocketAddress("127.0.0.1", Integer.parseInt(env("PORT"))), 128);
    s.setExecutor(Executors.newFixedThreadPool(16));
    route(
        s,
        "/quote",
        ex -> {
          byte[] req = ("{\"items\":" + Integer.parseInt(query(ex, "items", "1")) + "}").getBytes(StandardCharsets.UTF_8);
          byte[] out =
              ClientCalls.blockingUnaryCall(inventory, quote, CallOptions.DEFAULT.withDeadlineAfter(300, TimeUnit.MILLISECONDS), req);
          return new String(out, StandardCharsets.UTF_8);
        });
    route(
        s,
        "/reserve",
        ex -> {
          // Each attempt's outcome, as the breaker and grpc-java answered it.
          List<String> attempts = new java.util.ArrayList<>();
          java.util.function.Supplier<byte[]> attempt =
              () -> {
                try {
                  byte[] out =
                      breaker.executeSupplier(
                          () ->
                              ClientCalls.blockingUnaryCall(
                                  reservations, reserve, CallOptions.DEFAULT.withDeadlineAfter(1, TimeUnit.SECONDS), "{}".getBytes(StandardCharsets.UTF_8)));
                  attempts.add("ok");
                  return out;
                } catch (CallNotPermittedException e) {
                  attempts.add("rejected");
                  throw e;
                } catch (StatusRuntimeException e) {
                  // The server gone: refused (UNAVAILABLE), or its connection
                  // closed under the call (grpc-java's UNKNOWN "channel closed").
                  Status st = e.getStatus();
                  boolean gone =
                      st.getCode() == Status.Code.UNAVAILABLE
                          || (st.getCode() == Status.Code.UNKNOWN && String.valueOf(st.getDescription()).contains("channel closed"));
                  attempts.add(gone ? "unavailable" : "unexpected-" + st.getCode() + " " + st.getDescription());
                  throw e;
                }
              };
          try {
            return new String(retry.executeSupplier(attempt), StandardCharsets.UTF_8);
          } finally {
            // Every attempt refused by the server, or the first refused by
            // the open breaker; a request that met both, or recovered on a
            // retry, is neither (not scored).
            String saw =
                attempts.stream().allMatch("ok"::equals)
                    ? "healthy"
                    : attempts.stream().allMatch("unavailable"::equals)
                        ? "upstream_unavailable"
                        : attempts.equals(List.of("rejected"))
                            ? "circuit_open"
                            : attempts.stream().anyMatch(a -> a.startsWith("unexpected")) ? "unexpected:" + String.join(",", attempts) : "ambiguous";
            record(traceId(ex), saw, ",\"attempts\":\"" + String.join(",", attempts) + "\"");
          }
        });
    route(
        s,
        "/hold",
        ex -> {
          // What happened: Sentinel refused (its BlockException, no call
          // made), or grpc-java met the stopped server (UNAVAILABLE).
          Entry entry = null;
          try {
            entry = SphU.entry("reservations-hold");
            byte[] out =
                ClientCalls.blockingUnaryCall(
                    reservations, reserve, CallOptions.DEFAULT.withDeadlineAfter(1, TimeUnit.SECONDS), "{}".getBytes(StandardCharsets.UTF_8));
            return new String(out, StandardCharsets.UTF_8);
          } catch (BlockException e) {
            record(traceId(ex), "circuit_open", "");
            throw e;
          } catch (StatusRuntimeException e) {
            com.alibaba.csp.sentinel.Tracer.traceEntry(e, entry);
            Status.Code code = e.getStatus().getCode();
            record(traceId(ex), code == Status.Code.UNAVAILABLE ? "upstream_unavailable" : "unexpected-" + code, "");
            throw e;
          } finally {
            if (entry != null) entry.exit();
          }
        });
    // A tally holds a pooled connection for 200 ms: a burst larger than the
    // pool (8) waits in HikariCP for a connection. The wait is measured
    // around getConnection, as the handler saw it.
    route(
        s,
        "/tally",
        ex -> {
          long t0 = System.nanoTime();
          try (Connection c = db.getConnection()) {
            long waited = (System.nanoTime() - t0) / 1_000_000;
            try (PreparedStatement st = c.prepareStatement("SELECT pg_sleep(0.2)")) {
              st.executeQuery().close();
            }
            // One that got a connection at once spent its time in its own
            // query: not scored.
            record(traceId(ex), waited >= 100 ? "queueing" : "ambiguous", ",\"pool_wait_ms\":" + waited);
            return "{\"tally\":true}";
          }
        });
    route(
        s,
        "/lock/",
        ex -> {
          int id = Integer.parseInt(ex.getRequestURI().getPath().substring("/lock/".length()));
          try (Connection c = db.getConnection()) {
            c.setAutoCommit(false);
            try (PreparedStatement st = c.prepareStatement("SELECT qty FROM stock WHERE id = ? FOR UPDATE")) {
              st.setInt(1, id);
              st.executeQuery().close();
            }
            try (PreparedStatement st = c.prepareStatement("UPDATE stock SET qty = qty + 1 WHERE id = ?")) {
              st.setInt(1, id);
              st.executeUpdate();
            }
            c.commit();
          }
          return "{\"locked\":" + id + "}";
        });
    route(
        s,
        "/search",
        ex -> {
          try (Connection c = db.getConnection();
              PreparedStatement st = c.prepareStatement("SELECT id, name FROM items WHERE sku = ?")) {
            st.setString(1, query(ex, "sku", ""));
            try (ResultSet r = st.executeQuery()) {
              return r.next() ? "{\"id\":" + r.getLong(1) + "}" : "{}";
            }
          } catch (SQLException e) {
            throw new RuntimeException(e);
          }
        });
    // A report opens a connection of its own (no pool), as batch and
    // reporting code often does: it is refused when PostgreSQL has no slot.
    route(
        s,
        "/report",
        ex -> {
          try (Connection c = java.sql.DriverManager.getConnection(env("PG_URL"));
              PreparedStatement st = c.prepareStatement("SELECT sum(qty) FROM stock")) {
            st.executeQuery().close();
            return "{\"report\":true}";
          } catch (SQLException e) {
            if ("53300".equals(e.getSQLState())) record(traceId(ex), "db_connection_saturation", "");
            throw new RuntimeException(e);
          }
        });
    // CPU-bound work (a price table hashed), about 60 ms on an idle core.
    // The thread's wait for a core is what it observed: its wall time less
    // its CPU time (50 ms or more is starvation; under 10 ms, none).
    java.lang.management.ThreadMXBean threads = java.lang.management.ManagementFactory.getThreadMXBean();
    route(
        s,
        "/compute",
        ex -> {
          long cpu0 = threads.getCurrentThreadCpuTime(), wall0 = System.nanoTime();
          java.security.MessageDigest md = java.security.MessageDigest.getInstance("SHA-256");
          byte[] h = new byte[32];
          for (int i = 0; i < 300_000; i++) h = md.digest(h);
          long starved = ((System.nanoTime() - wall0) - (threads.getCurrentThreadCpuTime() - cpu0)) / 1_000_000;
          String saw = starved >= 50 ? "host_cpu_saturation" : starved < 10 ? "healthy" : "ambiguous";
          record(traceId(ex), saw, ",\"starved_ms\":" + starved);
          return "{\"h\":" + h[0] + "}";
        });
    route(s, "/supplier", ex -> System.currentTimeMillis() < drainUntil.get() ? null : "{\"supplied\":true}");
    route(
        s,
        "/order",
        ex -> {
          producer.send(new ProducerRecord<>("orders", "order", "{}")).get(5, TimeUnit.SECONDS);
          return "{\"ordered\":true}";
        });
    route(
        s,
        "/admin/drain",
        ex -> {
          drainUntil.set(System.currentTimeMillis() + Long.parseLong(query(ex, "ms", "0")));
          return "draining";
        });
    s.start();

    // The ledger, called by inventory (Go) over gRPC: a Redis increment.
    MethodDescriptor<byte[], byte[]> record = unary("ledger.Ledger", "Record");
    Grpc.newServerBuilderForPort(Integer.parseInt(env("GRPC_PORT")), InsecureServerCredentials.create())
        .addService(
            ServerServiceDefinition.builder("ledger.Ledger")
                .addMethod(
                    record,
                    ServerCalls.asyncUnaryCall(
                        (req, obs) -> {
                          long n = redis.incr("ledger:restock");
                          obs.onNext(("{\"n\":" + n + "}").getBytes(StandardCharsets.UTF_8));
                          obs.onCompleted();
                        }))
                .build())
        .build()
        .start()
        .awaitTermination();
  }

  // billing consumes the orders topic; the driver pauses it (the consumer
  // keeps its group membership and stops fetching), and each record's wait
  // in the topic is what it observed.
  static void billing() throws Exception {
    AtomicLong pausedUntil = new AtomicLong();
    HttpServer admin = HttpServer.create(new InetSocketAddress("127.0.0.1", Integer.parseInt(env("PORT"))), 16);
    admin.createContext(
        "/pause",
        ex -> {
          pausedUntil.set(System.currentTimeMillis() + Long.parseLong(query(ex, "ms", "0")));
          respond(ex, 200, "paused");
        });
    admin.start();
    Properties cp = new Properties();
    cp.put("bootstrap.servers", env("KAFKA"));
    cp.put("group.id", "billing");
    cp.put("auto.offset.reset", "earliest");
    cp.put("key.deserializer", StringDeserializer.class.getName());
    cp.put("value.deserializer", StringDeserializer.class.getName());
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
      consumer.subscribe(List.of("orders"));
      while (true) {
        boolean paused = System.currentTimeMillis() < pausedUntil.get();
        if (paused) consumer.pause(consumer.assignment());
        else consumer.resume(consumer.paused());
        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(50))) {
          long wait = System.currentTimeMillis() - r.timestamp();
          Header h = r.headers().lastHeader("traceparent");
          String id = h == null ? "" : traceIdOf(new String(h.value(), StandardCharsets.UTF_8));
          String saw = wait >= 1000 ? "consumer_lag" : wait < 100 ? "healthy" : "ambiguous";
          record(id, saw, ",\"consume_wait_ms\":" + wait);
        }
      }
    }
  }
}
