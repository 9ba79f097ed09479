# Multi-stage: build in the Rust image, run on a slim Debian with only the binary.
FROM rust:1-bookworm AS builder
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
COPY lua ./lua
COPY migrations ./migrations
# The admin console and the Swagger UI are compiled into the binary.
COPY static ./static
# The workspace names the load generator crate; it is not built into the image.
COPY bench ./bench
# --locked: the dependencies of Cargo.lock, as tested, or no image.
RUN cargo build --release --locked --bin seckill

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* && useradd --system --uid 10001 seckill
COPY --from=builder /src/target/release/seckill /usr/local/bin/seckill
USER seckill
ENV SECKILL_HTTP_ADDR=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/seckill"]
CMD ["all"]
