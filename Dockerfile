# The shipped binary (the `dist` profile: thin LTO, no symbols, panics abort) in a small image.
#   docker build -t causeway:dev .
# Try it (deploy/docker/pipeline.yaml: the default pipeline on every
# interface of the container, without TLS or credentials, as it says):
#   docker run --rm -p 4317:4317 -p 4318:4318 -p 8888:8888 causeway:dev
# The gateway tier (examples/gateway.yaml: TLS and a bearer token on OTLP and
# on the telemetry server; the certificate and key mounted at /etc/causeway-tls):
#   mkdir tls && openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj /CN=causeway \
#     -keyout tls/tls.key -out tls/tls.crt && chmod 644 tls/tls.key
#   docker run --rm -p 4317:4317 -p 4318:4318 -p 8888:8888 \
#     -e CAUSEWAY_OTLP_TOKEN=change-me -e CAUSEWAY_TELEMETRY_TOKEN=change-me-too \
#     -e POD_NAME=causeway-0 -v $PWD/tls:/etc/causeway-tls:ro \
#     -v $PWD/examples/gateway.yaml:/etc/causeway/pipeline.yaml:ro causeway:dev
#   (its exporters' endpoints default to Kubernetes service names: set
#   JAEGER_ENDPOINT, LOKI_ENDPOINT, VM_ENDPOINT, ALERTMANAGER_URL, KAFKA_BROKERS.)
# Build stage: librdkafka is built from source by rdkafka-sys (cmake, a C
# toolchain) and links OpenSSL (TLS and SASL/SCRAM to Kafka); protoc is not
# needed (the OTLP types come with opentelemetry-proto).
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends cmake clang libssl-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --profile dist --locked --bin causeway

# Runtime: glibc and libssl (librdkafka), CA certificates, an unprivileged user, and
# writable state for checkpoints and persistent queues.
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libssl3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/causeway causeway \
    && mkdir -p /etc/causeway /var/lib/causeway \
    && chown causeway /var/lib/causeway
COPY --from=build /src/target/dist/causeway /usr/local/bin/causeway
COPY deploy/docker/pipeline.yaml /etc/causeway/pipeline.yaml
USER 10001
WORKDIR /var/lib/causeway
# OTLP gRPC, OTLP HTTP, /metrics + /healthz + /readyz.
EXPOSE 4317 4318 8888
ENTRYPOINT ["/usr/local/bin/causeway"]
CMD ["--config", "/etc/causeway/pipeline.yaml"]
