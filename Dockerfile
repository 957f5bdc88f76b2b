# webhook-guard image. The build stage runs the same go build as
# "make build" (a test in deploy/ checks that they agree); without a
# container engine, "make docker-build-equivalent" builds the same binary.

# Build stage. go.mod and go.sum are copied first, so the module download
# layer is cached until the dependencies change.
FROM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY internal/ internal/
COPY certs/ certs/
ARG VERSION=dev
# COMMIT: the build context has no .git; "make docker-build" passes it.
ARG COMMIT=unknown
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/guard ./cmd/guard

# Runtime stage: distroless static, no shell, non-root.
FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=build /out/guard /guard
USER 65532:65532
ENTRYPOINT ["/guard"]
CMD ["run", "--config", "/etc/webhook-guard/config.yaml"]
