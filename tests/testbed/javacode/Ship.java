// The shipper of the Java code test bed (tests/rca_testbed_code.rs):
// async-profiler records JFR in a loop (`jfr,loop=2s,file=DIR/x-%t.jfr`),
// and this converts each finished recording with async-profiler's own
// converter (tools.profiler:jfr-converter, `JfrToOtlp`: a sample per thread
// and stack with a timestamp per event) into OTLP profiles, once per mode
// asked, and posts them to an OTLP/HTTP endpoint, as a log shipper would.
//
//   java -cp jfr-converter.jar:. Ship DIR URL SERVICE MODE...
//
// MODE is `cpu` (on-CPU samples) or `lock` (contended monitors, each
// event's wait in ns). The converter writes no resource, so the shipper
// names the service (`service.name`), as a Collector's resource processor
// would. A recording is finished when a newer one exists; DIR/stop asks it
// to ship the last one too and exit.

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;
import one.convert.Arguments;
import one.convert.JfrToOtlp;
import one.jfr.JfrReader;

public class Ship {
    public static void main(String[] argv) throws Exception {
        File dir = new File(argv[0]);
        String url = argv[1];
        byte[] resource = resource(argv[2]);
        String[] modes = Arrays.copyOfRange(argv, 3, argv.length);
        HttpClient http = HttpClient.newHttpClient();
        Set<String> shipped = new HashSet<>();
        while (true) {
            boolean stop = new File(dir, "stop").exists();
            File[] files = dir.listFiles((d, n) -> n.endsWith(".jfr"));
            Arrays.sort(files);
            int finished = stop ? files.length : files.length - 1;
            for (int i = 0; i < finished; i++) {
                File f = files[i];
                if (!shipped.add(f.getName())) continue;
                for (String mode : modes) {
                    byte[] body = withResource(convert(f.getPath(), mode), resource);
                    HttpResponse<String> r = http.send(
                            HttpRequest.newBuilder(URI.create(url))
                                    .header("Content-Type", "application/x-protobuf")
                                    .POST(HttpRequest.BodyPublishers.ofByteArray(body))
                                    .build(),
                            HttpResponse.BodyHandlers.ofString());
                    System.out.println("shipped " + f.getName() + " " + mode + " (" + body.length + " bytes): " + r.statusCode());
                    if (r.statusCode() / 100 != 2) {
                        System.err.println(r.body());
                    }
                }
            }
            if (stop) {
                System.out.println("stopped");
                return;
            }
            Thread.sleep(100);
        }
    }

    /** One recording as OTLP profiles of `mode`, by the converter. */
    static byte[] convert(String file, String mode) throws IOException {
        Arguments args = mode.equals("lock")
                ? new Arguments("--lock", "--total", "--dot", "-o", "otlp")
                : new Arguments("--" + mode, "--dot", "-o", "otlp");
        JfrToOtlp c;
        try (JfrReader jfr = new JfrReader(file)) {
            c = new JfrToOtlp(jfr, args);
            c.convert();
        }
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        c.dump(out);
        return out.toByteArray();
    }

    /** `Resource { attributes: [service.name = service] }`, encoded. */
    static byte[] resource(String service) {
        byte[] any = field(1, service.getBytes(StandardCharsets.UTF_8));
        byte[] kv = concat(field(1, "service.name".getBytes(StandardCharsets.UTF_8)), field(2, any));
        return field(1, kv);
    }

    /**
     * The request with `resource` (a Resource's fields) as the resource of
     * each of its ResourceProfiles (field 1 of the request; the resource is
     * field 1 of a ResourceProfiles).
     */
    static byte[] withResource(byte[] req, byte[] resource) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        int[] at = {0};
        while (at[0] < req.length) {
            long tag = varint(req, at);
            int wire = (int) (tag & 7);
            int start = at[0];
            if (wire == 2) {
                int len = (int) varint(req, at);
                byte[] v = Arrays.copyOfRange(req, at[0], at[0] + len);
                at[0] += len;
                if (tag >>> 3 == 1) {
                    v = concat(field(1, resource), v);
                }
                out.writeBytes(field((int) (tag >>> 3), v));
            } else if (wire == 0) {
                varint(req, at);
                writeVarint(out, tag);
                out.write(req, start, at[0] - start);
            } else {
                int len = wire == 1 ? 8 : 4;
                writeVarint(out, tag);
                out.write(req, at[0], len);
                at[0] += len;
            }
        }
        return out.toByteArray();
    }

    static long varint(byte[] b, int[] at) {
        long v = 0;
        for (int shift = 0; ; shift += 7) {
            byte x = b[at[0]++];
            v |= (long) (x & 0x7f) << shift;
            if (x >= 0) return v;
        }
    }

    static void writeVarint(ByteArrayOutputStream out, long v) {
        while ((v & ~0x7fL) != 0) {
            out.write((int) ((v & 0x7f) | 0x80));
            v >>>= 7;
        }
        out.write((int) v);
    }

    /** A length-delimited field. */
    static byte[] field(int number, byte[] value) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        writeVarint(out, ((long) number << 3) | 2);
        writeVarint(out, value.length);
        out.writeBytes(value);
        return out.toByteArray();
    }

    static byte[] concat(byte[] a, byte[] b) {
        byte[] c = Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, c, a.length, b.length);
        return c;
    }
}
