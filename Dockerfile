# The release binary in a small image.
#   docker build -t causeway:dev .
#   docker run --rm -p 4317:4317 -p 4318:4318 -p 8888:8888 \
#     -v $PWD/examples/gateway.yaml:/etc/causeway/pipeline.yaml:ro causeway:dev
# Build stage: librdkafka is built from source by rdkafka-sys (cmake, a C
# toolchain) and links OpenSSL (TLS and SASL/SCRAM to Kafka); protoc is not
# needed (the OTLP types come with opentelemetry-proto).
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends cmake clang libssl-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin causeway \
    && strip target/release/causeway

# Runtime: glibc and libssl (librdkafka), CA certificates, an unprivileged user, and
# writable state for checkpoints and persistent queues.
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libssl3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/causeway causeway \
    && mkdir -p /etc/causeway /var/lib/causeway \
    && chown causeway /var/lib/causeway
COPY --from=build /src/target/release/causeway /usr/local/bin/causeway
COPY pipeline.yaml /etc/causeway/pipeline.yaml
USER 10001
WORKDIR /var/lib/causeway
# OTLP gRPC, OTLP HTTP, /metrics + /healthz + /readyz.
EXPOSE 4317 4318 8888
ENTRYPOINT ["/usr/local/bin/causeway"]
CMD ["--config", "/etc/causeway/pipeline.yaml"]
