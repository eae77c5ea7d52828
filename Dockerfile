# syntax=docker/dockerfile:1
#
# One image holding all three usher binaries; the command picks which one runs:
#
#   docker build -t usher:local .
#   docker run --rm usher:local usher-dispatcher --help
#   docker run --rm -p 8080:8080 -e USHER_REDIS_URL=redis://redis:6379 usher:local usher-gateway
#   docker run --rm usher:local usher-booking-demo
#
# Configuration is by USHER_* environment variables (see each binary's --help).

# ---- build ---------------------------------------------------------------------------------
FROM rust:1-bookworm AS builder
WORKDIR /src

# The whole workspace (.dockerignore keeps target/ and .git out of the context).
COPY . .

# Cache mounts keep the crates.io index/downloads and the target dir between builds; the
# binaries are copied out of the cached target dir, which does not end up in the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked \
        -p usher-dispatcher -p usher-gateway -p usher-booking-demo \
    && mkdir -p /out \
    && cp target/release/usher-dispatcher target/release/usher-gateway \
          target/release/usher-booking-demo /out/

# ---- runtime -------------------------------------------------------------------------------
FROM debian:bookworm-slim AS runtime

# ca-certificates: TLS to Redis or a JWKS over https. curl: container health checks (/readyz).
# DL3008 (pin apt package versions) is ignored on purpose: Debian's security archive replaces
# these packages' versions when it patches them and drops the old ones, so pinned versions
# would break the build after the next security update; unpinned, every build gets the patched
# ones. The base image tag (bookworm-slim) pins the release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*

# An unprivileged user with a fixed uid, so Kubernetes' runAsNonRoot can check it.
RUN groupadd --system --gid 10001 usher \
    && useradd --system --uid 10001 --gid usher --no-create-home --shell /usr/sbin/nologin usher

COPY --from=builder /out/ /usr/local/bin/

USER 10001:10001
# gateway, dispatcher, booking demo (their default USHER_LISTEN ports, on 0.0.0.0)
EXPOSE 8080 8081 8082

# No ENTRYPOINT: the command names the binary. The default is a gateway.
CMD ["usher-gateway"]
