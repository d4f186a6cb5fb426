# syntax=docker/dockerfile:1
# The tiled-operator manager: a static Go binary on distroless "static", running as uid 65532.
#   docker build -t ghcr.io/bluesky/tiled-operator:0.1.0 .
# Multi-platform: docker buildx build --platform linux/amd64,linux/arm64 ...

FROM --platform=$BUILDPLATFORM golang:1.26 AS builder
ARG TARGETOS=linux
ARG TARGETARCH
WORKDIR /workspace
# Module downloads are cached in their own layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# CGO off: a static binary with no libc, so that it runs on distroless/static or scratch.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/manager ./cmd/manager

FROM gcr.io/distroless/static:nonroot
LABEL org.opencontainers.image.source="https://github.com/bluesky/tiled-operator" \
      org.opencontainers.image.description="Kubernetes operator for Bluesky's Tiled data access service"
WORKDIR /
COPY --from=builder /out/manager /manager
# Numeric, so that the kubelet can verify runAsNonRoot without reading /etc/passwd.
USER 65532:65532
ENTRYPOINT ["/manager"]
