package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
)

// errBadCABundle means clientConfig.caBundle holds no usable PEM certificate.
// kube-apiserver cannot call such a webhook either, so it is a tls failure.
var errBadCABundle = errors.New("caBundle contains no usable PEM certificate")

// httpStatusError is a response with an unacceptable HTTP status code.
type httpStatusError struct{ code int }

func (e *httpStatusError) Error() string {
	return fmt.Sprintf("webhook returned HTTP status %d", e.code)
}

// badResponseError is a 200 response whose body kube-apiserver would reject.
type badResponseError struct{ msg string }

func (e *badResponseError) Error() string { return "bad webhook response: " + e.msg }

func badResponsef(format string, args ...any) error {
	return &badResponseError{msg: fmt.Sprintf(format, args...)}
}

// Classify maps an error from reaching a webhook to a FailureReason. It
// returns "" for a nil error. The checks run in this order; the first match
// wins:
//
//  1. this package's own response errors: bad HTTP status -> http-status;
//     bad AdmissionReview body -> bad-response; ErrNoRoute -> no-route.
//  2. timeout: context.DeadlineExceeded, os.ErrDeadlineExceeded or any
//     net.Error whose Timeout() is true (dial, TLS handshake, DNS, body read).
//  3. tls: an unusable caBundle, x509.UnknownAuthorityError,
//     x509.CertificateInvalidError, x509.HostnameError, x509.SystemRootsError,
//     x509.ConstraintViolationError, x509.UnhandledCriticalExtension,
//     x509.InsecureAlgorithmError, *tls.CertificateVerificationError,
//     tls.RecordHeaderError, tls.AlertError, *tls.ECHRejectionError, and
//     net.OpError{Op: "remote error"} (a TLS alert sent by the server).
//  4. refused: ECONNREFUSED, and a connection the server dropped before a
//     complete response arrived (ECONNRESET, ECONNABORTED, EPIPE, io.EOF,
//     io.ErrUnexpectedEOF). kube-apiserver reports a dropped connection as a
//     failed call, not as a bad body, so bad-response is reserved for HTTP
//     bodies that were received in full.
//  5. no-route: EHOSTUNREACH, ENETUNREACH, EHOSTDOWN, ENETDOWN,
//     EADDRNOTAVAIL, and *net.DNSError (no such host).
//  6. tls again, by message: crypto/tls and net/http return some handshake
//     errors untyped ("tls: ...", "x509: ...", "server gave HTTP response to
//     HTTPS client").
//  7. anything else -> no-route (an unclassifiable network error).
func Classify(err error) FailureReason {
	if err == nil {
		return ""
	}
	var (
		statusErr *httpStatusError
		badErr    *badResponseError
	)
	switch {
	case errors.As(err, &statusErr):
		return ReasonHTTPStatus
	case errors.As(err, &badErr):
		return ReasonBadResponse
	case errors.Is(err, ErrNoRoute):
		return ReasonNoRoute
	case isTimeout(err):
		return ReasonTimeout
	case isTypedTLS(err):
		return ReasonTLS
	case isRefusedOrDropped(err):
		return ReasonRefused
	case isNoRoute(err):
		return ReasonNoRoute
	case hasTLSMessage(err):
		return ReasonTLS
	default:
		return ReasonNoRoute
	}
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

func isTypedTLS(err error) bool {
	if errors.Is(err, errBadCABundle) {
		return true
	}
	var (
		unknownAuthority  x509.UnknownAuthorityError
		certInvalid       x509.CertificateInvalidError
		hostname          x509.HostnameError
		systemRoots       x509.SystemRootsError
		constraint        x509.ConstraintViolationError
		unhandledCritical x509.UnhandledCriticalExtension
		insecureAlgorithm x509.InsecureAlgorithmError
		verification      *tls.CertificateVerificationError
		recordHeader      tls.RecordHeaderError
		alert             tls.AlertError
		echRejection      *tls.ECHRejectionError
		opErr             *net.OpError
	)
	return errors.As(err, &unknownAuthority) ||
		errors.As(err, &certInvalid) ||
		errors.As(err, &hostname) ||
		errors.As(err, &systemRoots) ||
		errors.As(err, &constraint) ||
		errors.As(err, &unhandledCritical) ||
		errors.As(err, &insecureAlgorithm) ||
		errors.As(err, &verification) ||
		errors.As(err, &recordHeader) ||
		errors.As(err, &alert) ||
		errors.As(err, &echRejection) ||
		(errors.As(err, &opErr) && opErr.Op == "remote error")
}

func isRefusedOrDropped(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF)
}

func isNoRoute(err error) bool {
	var dnsErr *net.DNSError
	return errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, syscall.EHOSTDOWN) ||
		errors.Is(err, syscall.ENETDOWN) ||
		errors.Is(err, syscall.EADDRNOTAVAIL) ||
		errors.As(err, &dnsErr)
}

func hasTLSMessage(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "tls: ") ||
		strings.Contains(msg, "x509: ") ||
		strings.Contains(msg, "server gave HTTP response to HTTPS client")
}
