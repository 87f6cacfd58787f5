# syntax=docker/dockerfile:1
# The controller image, for those with a Docker engine. scripts/image.sh builds the same
# image without one (an OCI layout, with umoci): both assemble it from the two trees
# scripts/image-rootfs.sh makes, so they hold the same files.
#
# - base: Node 24 (stripped), the shared libraries it links, CA certificates and the
#   user 65532. No shell, no package manager.
# - app: the CLI and the controller bundled with their production dependencies into a
#   few ES modules (scripts/bundle.ts; no test bed: sandbox/ and src/demo, which only
#   `gatehouse sandbox` and `gatehouse demo` load, are left out).
# The process runs as 65532 and needs nothing writable but /tmp (the Deployment mounts an
# emptyDir there; the root filesystem is read-only).
#
# Targets: `controller` (the default, the last stage) and `cli`, whose entrypoint is the
# same CLI with no command of its own (`docker run IMAGE-cli gate ...`).
FROM node:24-bookworm-slim AS base
RUN apt-get update && apt-get install -y --no-install-recommends binutils ca-certificates \
  && rm -rf /var/lib/apt/lists/*
COPY scripts/image-rootfs.sh /build/scripts/
RUN bash /build/scripts/image-rootfs.sh base /rootfs /usr/local/bin/node

FROM node:24-bookworm-slim AS app
WORKDIR /src
COPY package.json package-lock.json ./
# The whole lock: esbuild bundles the production dependencies from it.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY . .
RUN bash scripts/image-rootfs.sh app /app

FROM scratch AS cli
COPY --from=base /rootfs /
COPY --from=app /app /app
ENV NODE_ENV=production PATH=/usr/local/bin
WORKDIR /app
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/node", "/app/main.mjs"]

FROM cli AS controller
# As the Deployment sets it (src/manifests/controller.ts, CONTROLLER_MALLOC_ARENA_MAX).
ENV MALLOC_ARENA_MAX=2
EXPOSE 8080
CMD ["controller"]
