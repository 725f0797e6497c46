// The Java side of the code test bed (tests/rca_testbed_code.rs): the same
// three routes as tests/testbed/codeshop's shop, on the JDK's HttpServer
// under the OpenTelemetry Java agent, profiled by async-profiler (its
// agent library from Maven Central, sending its own OTLP profiles):
//
//   /parse?n=N    Ledger.parseAst mixes 64·N times (CPU in the service's code)
//   /symbols      Ledger.lookupSymbols enters the symbol table's monitor,
//                 which Ledger.refreshSymbols holds for HOLD ms when the
//                 driver sets it (POST /hold?ms= on ADMIN_PORT)
//   /render?n=N   Ledger.renderPage allocates N small objects (garbage that
//                 drives the collector)
//   /report?ms=M  Ledger.loadReport waits M ms off CPU in the service's own
//                 code (a blocking read no instrumentation sees)
//
// Ground truth is what the mechanism did, measured here for each request
// and appended to TRUTH_FILE, one JSON line per trace id (read from the
// traceparent the caller sent): the work asked for, the time the request
// waited to enter the monitor, the collections that ran while it allocated.
// The JDK only: no OpenTelemetry API is called.

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Executors;

public class Ledger {
    static volatile long sink;
    static final Object symtab = new Object();
    static volatile long holdMs = 0;
    static long symbols = 0;
    static OutputStream truth;

    static void parseAst(int n) {
        long h = 1125899906842597L;
        for (int i = 0; i < n; i++) {
            h = 31 * h + (h >>> 17) ^ i;
        }
        sink = h;
    }

    static void refreshSymbols() throws InterruptedException {
        synchronized (symtab) {
            long ms = holdMs;
            if (ms > 0) {
                Thread.sleep(ms);
            }
            symbols++;
        }
    }

    /** The guides' parseASTWithLock: parses under the symbol table's monitor. Returns the wait (ns). */
    static long lookupSymbols() {
        long t = System.nanoTime();
        synchronized (symtab) {
            long waited = System.nanoTime() - t;
            parseAst(2000);
            symbols++;
            return waited;
        }
    }

    /** Off CPU for ms in the service's own code. Returns the time it took (ns). */
    static long loadReport(int ms) throws InterruptedException {
        long t = System.nanoTime();
        Thread.sleep(ms);
        return System.nanoTime() - t;
    }

    static final class Node {
        Node next;
        long a, b, c, d;
    }

    /** A page of n nodes, the last 65536 alive at a time. */
    static int renderPage(int n) {
        Node[] ring = new Node[1 << 16];
        for (int i = 0; i < n; i++) {
            Node p = new Node();
            p.a = i;
            ring[i & (ring.length - 1)] = p;
        }
        int c = 0;
        for (Node p : ring) {
            if (p != null) c++;
        }
        return c;
    }

    static long collections() {
        long n = 0;
        for (GarbageCollectorMXBean b : ManagementFactory.getGarbageCollectorMXBeans()) {
            n += Math.max(0, b.getCollectionCount());
        }
        return n;
    }

    static synchronized void record(String json) throws IOException {
        truth.write((json + "\n").getBytes(StandardCharsets.UTF_8));
        truth.flush();
    }

    static String traceId(HttpExchange ex) {
        String tp = ex.getRequestHeaders().getFirst("traceparent");
        return tp != null && tp.length() >= 35 ? tp.substring(3, 35) : "";
    }

    static int query(HttpExchange ex, String key) {
        String q = ex.getRequestURI().getQuery();
        if (q == null) return 0;
        for (String kv : q.split("&")) {
            if (kv.startsWith(key + "=")) return Integer.parseInt(kv.substring(key.length() + 1));
        }
        return 0;
    }

    static void answer(HttpExchange ex, int status) throws IOException {
        byte[] body = "ok\n".getBytes(StandardCharsets.UTF_8);
        ex.sendResponseHeaders(status, body.length);
        try (OutputStream o = ex.getResponseBody()) {
            o.write(body);
        }
    }

    static String label(HttpExchange ex) {
        String l = ex.getRequestHeaders().getFirst("X-Label");
        return l == null ? "" : l;
    }

    public static void main(String[] args) throws Exception {
        truth = new FileOutputStream(System.getenv("TRUTH_FILE"), true);
        Thread refresher = new Thread(() -> {
            while (true) {
                try {
                    refreshSymbols();
                    Thread.sleep(20);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }, "symbol-refresher");
        refresher.setDaemon(true);
        refresher.start();

        HttpServer admin = HttpServer.create(new InetSocketAddress("127.0.0.1", Integer.parseInt(System.getenv("ADMIN_PORT"))), 16);
        admin.createContext("/hold", ex -> {
            holdMs = query(ex, "ms");
            answer(ex, 200);
        });
        admin.start();

        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", Integer.parseInt(System.getenv("PORT"))), 64);
        server.setExecutor(Executors.newFixedThreadPool(8));
        server.createContext("/parse", ex -> {
            int n = query(ex, "n");
            long t = System.nanoTime();
            // A mixing step costs a sixty-fourth of the Go shop's hash: the
            // same n asks for about the same time.
            parseAst(n * 64);
            record(String.format("{\"trace_id\":\"%s\",\"route\":\"/parse\",\"label\":\"%s\",\"function\":\"Ledger.parseAst\",\"work\":%d,\"ms\":%d}",
                    traceId(ex), label(ex), n, (System.nanoTime() - t) / 1_000_000));
            answer(ex, 200);
        });
        server.createContext("/symbols", ex -> {
            long t = System.nanoTime();
            long waited = lookupSymbols();
            record(String.format("{\"trace_id\":\"%s\",\"route\":\"/symbols\",\"label\":\"%s\",\"function\":\"Ledger.lookupSymbols\",\"waited_ms\":%d,\"ms\":%d}",
                    traceId(ex), label(ex), waited / 1_000_000, (System.nanoTime() - t) / 1_000_000));
            answer(ex, 200);
        });
        server.createContext("/render", ex -> {
            int n = query(ex, "n");
            long t = System.nanoTime(), gc = collections();
            renderPage(n);
            record(String.format("{\"trace_id\":\"%s\",\"route\":\"/render\",\"label\":\"%s\",\"function\":\"Ledger.renderPage\",\"work\":%d,\"gc_cycles\":%d,\"ms\":%d}",
                    traceId(ex), label(ex), n, collections() - gc, (System.nanoTime() - t) / 1_000_000));
            answer(ex, 200);
        });
        server.createContext("/report", ex -> {
            int ms = query(ex, "ms");
            long t = System.nanoTime(), off;
            try {
                off = loadReport(ms);
            } catch (InterruptedException e) {
                answer(ex, 500);
                return;
            }
            record(String.format("{\"trace_id\":\"%s\",\"route\":\"/report\",\"label\":\"%s\",\"function\":\"Ledger.loadReport\",\"off_cpu_ms\":%d,\"ms\":%d}",
                    traceId(ex), label(ex), off / 1_000_000, (System.nanoTime() - t) / 1_000_000));
            answer(ex, 200);
        });
        server.start();
        System.out.println("ready");
    }
}
