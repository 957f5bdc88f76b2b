package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestClassify_mapping(t *testing.T) {
	dial := func(err error) error {
		return &url.Error{Op: "Post", URL: "https://hook.team.svc:443/mutate", Err: &net.OpError{
			Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err),
		}}
	}
	read := func(err error) error {
		return &url.Error{Op: "Post", URL: "https://10.0.0.1/mutate", Err: &net.OpError{
			Op: "read", Net: "tcp", Err: os.NewSyscallError("read", err),
		}}
	}
	wrapped := func(err error) error { return &url.Error{Op: "Post", URL: "https://10.0.0.1/mutate", Err: err} }

	tests := map[string]struct {
		err  error
		want FailureReason
	}{
		"no error has no reason":                            {nil, ""},
		"an exceeded context deadline is a timeout":         {wrapped(context.DeadlineExceeded), ReasonTimeout},
		"an exceeded I/O deadline is a timeout":             {read(os.ErrDeadlineExceeded), ReasonTimeout},
		"a DNS timeout is a timeout":                        {&net.DNSError{Err: "i/o timeout", Name: "x", IsTimeout: true}, ReasonTimeout},
		"an unknown certificate authority is tls":           {wrapped(x509.UnknownAuthorityError{}), ReasonTLS},
		"an invalid certificate is tls":                     {wrapped(x509.CertificateInvalidError{Reason: x509.Expired}), ReasonTLS},
		"a hostname mismatch is tls":                        {wrapped(x509.HostnameError{Host: "hook.team.svc", Certificate: &x509.Certificate{}}), ReasonTLS},
		"a failed certificate verification is tls":          {wrapped(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), ReasonTLS},
		"a non-TLS record header is tls":                    {wrapped(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), ReasonTLS},
		"a TLS alert is tls":                                {wrapped(&net.OpError{Op: "remote error", Err: tls.AlertError(42)}), ReasonTLS},
		"an unusable caBundle is tls":                       {errBadCABundle, ReasonTLS},
		"an HTTP answer to an HTTPS client is tls":          {wrapped(errors.New("http: server gave HTTP response to HTTPS client")), ReasonTLS},
		"an untyped crypto/tls error is tls":                {wrapped(errors.New("tls: server selected unsupported protocol version 301")), ReasonTLS},
		"a refused connection is refused":                   {dial(syscall.ECONNREFUSED), ReasonRefused},
		"a reset connection is refused":                     {read(syscall.ECONNRESET), ReasonRefused},
		"a broken pipe is refused":                          {read(syscall.EPIPE), ReasonRefused},
		"EOF before a response is refused":                  {wrapped(io.EOF), ReasonRefused},
		"an unexpected EOF in the body is refused":          {fmt.Errorf("reading response body: %w", io.ErrUnexpectedEOF), ReasonRefused},
		"an unreachable host is no-route":                   {dial(syscall.EHOSTUNREACH), ReasonNoRoute},
		"an unreachable network is no-route":                {dial(syscall.ENETUNREACH), ReasonNoRoute},
		"an unknown host name is no-route":                  {wrapped(&net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "hook.example.com", IsNotFound: true}}), ReasonNoRoute},
		"ErrNoRoute is no-route":                            {fmt.Errorf("%w: service team/hook not found", ErrNoRoute), ReasonNoRoute},
		"an unclassifiable network error is no-route":       {wrapped(errors.New("something odd happened")), ReasonNoRoute},
		"an unacceptable HTTP status is http-status":        {&httpStatusError{code: 500}, ReasonHTTPStatus},
		"an invalid AdmissionReview body is bad-response":   {badResponsef("response is absent"), ReasonBadResponse},
		"a wrapped invalid AdmissionReview is bad-response": {fmt.Errorf("probe: %w", badResponsef("x")), ReasonBadResponse},
		"a timeout wins over a message mentioning tls":      {wrapped(timeoutError{"net/http: TLS handshake timeout"}), ReasonTimeout},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, Classify(tc.err), "err: %v", tc.err)
		})
	}
}

// timeoutError is a net.Error that timed out, like net/http's handshake timeout.
type timeoutError struct{ msg string }

func (e timeoutError) Error() string   { return e.msg }
func (e timeoutError) Timeout() bool   { return true }
func (e timeoutError) Temporary() bool { return true }
