# syntax=docker/dockerfile:1
# The controller image. Node 24 runs the TypeScript sources directly (type stripping),
# so there is no build step: one stage installs production dependencies, the final
# stage holds them and the sources, runs as a non-root user, and needs nothing
# writable but /tmp (the Deployment mounts an emptyDir there; the root filesystem is
# read-only).
FROM node:24-bookworm-slim AS dependencies
WORKDIR /app
COPY package.json package-lock.json ./
# --omit=dev leaves out the `node` package too: the image's own Node 24 runs gatehouse.
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund

FROM node:24-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=dependencies /app/node_modules ./node_modules
COPY package.json ./
# Without the test bed: .dockerignore leaves out src/demo (and sandbox/ is not copied),
# which only `gatehouse sandbox` and `gatehouse demo` load (src/cli/test-bed.ts).
COPY src ./src
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["node", "/app/src/cli/main.ts"]
CMD ["controller"]
