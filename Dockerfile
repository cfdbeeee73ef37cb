# rampart container image: a static-enough binary on distroless, running as a non-root user,
# with the state directory (local CA, ACME certificates) and the disk cache directory (for
# cache_disk = "/var/cache/rampart") as volumes.
#
#   docker build --build-arg RAMPART_COMMIT=$(git rev-parse --short=12 HEAD) -t rampart .
#   docker run -p 8080:8080 -v $PWD/rampart.toml:/etc/rampart/rampart.toml:ro \
#              -v rampart-state:/var/lib/rampart -v rampart-cache:/var/cache/rampart rampart
#
# The process is not root, so the configuration must listen on ports above 1023 (map 80 to 8080
# with -p 80:8080). `docker kill -s HUP` reloads the configuration; `docker stop` drains
# in-flight requests (give it --time 40 for the default 30 s shutdown_timeout_seconds).
# The build checks the example configuration with `check --strict`. Your own file is mounted at
# run time, so check it before deploying (warnings fail too):
#   docker run --rm -v $PWD/rampart.toml:/etc/rampart/rampart.toml:ro rampart check --strict

FROM rust:1-bookworm AS build
WORKDIR /src
RUN apt-get update && apt-get install -y --no-install-recommends cmake && rm -rf /var/lib/apt/lists/*
COPY . .
ARG RAMPART_COMMIT=unknown
ENV RAMPART_COMMIT=${RAMPART_COMMIT}
RUN cargo build --profile dist --locked -p rampart \
 && install -D -m 0755 target/dist/rampart /out/usr/bin/rampart \
 && install -d -m 0700 /out/var/lib/rampart /out/var/cache/rampart /out/etc/rampart \
 && install -m 0644 packaging/rampart.toml /out/etc/rampart/rampart.example.toml \
 && /out/usr/bin/rampart check --strict --config /out/etc/rampart/rampart.example.toml

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build --chown=65532:65532 /out/ /
ENV STATE_DIRECTORY=/var/lib/rampart
VOLUME ["/var/lib/rampart", "/var/cache/rampart"]
USER 65532:65532
EXPOSE 8080 8443
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/rampart"]
CMD ["run", "--config", "/etc/rampart/rampart.toml"]
