# Build: the same command as "make build".
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY internal/ internal/
COPY certs/ certs/
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/guard ./cmd/guard

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/guard /guard
USER 65532:65532
ENTRYPOINT ["/guard"]
CMD ["run", "--config", "/etc/webhook-guard/config.yaml"]
