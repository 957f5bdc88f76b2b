package certs

import (
	"context"
	"testing"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

func TestDiagnoseInjectedCA(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(d)} }
	certificate := func(st certmanagerv1.CertificateStatus) *certmanagerv1.Certificate {
		return &certmanagerv1.Certificate{
			ObjectMeta: metav1.ObjectMeta{Namespace: "hooks", Name: "serving", Generation: 3},
			Status:     st,
		}
	}
	ready := func(status cmmeta.ConditionStatus, reason, message string) certmanagerv1.CertificateCondition {
		return certmanagerv1.CertificateCondition{Type: certmanagerv1.CertificateConditionReady, Status: status, Reason: reason, Message: message, ObservedGeneration: 3}
	}
	injected := map[string]string{"cert-manager.io/inject-ca-from": "hooks/serving"}

	cases := map[string]struct {
		annotations map[string]string
		cert        *certmanagerv1.Certificate
		want        string
	}{
		"no annotation: nothing to say": {
			annotations: map[string]string{"other": "x"},
			want:        "",
		},
		"a malformed annotation is named": {
			annotations: map[string]string{"cert-manager.io/inject-ca-from": "serving"},
			want:        `annotation cert-manager.io/inject-ca-from is "serving", not <namespace>/<certificate>; cert-manager injects no caBundle`,
		},
		"a missing Certificate is named": {
			annotations: injected,
			want:        "Certificate hooks/serving named by annotation cert-manager.io/inject-ca-from does not exist; cert-manager injects no caBundle",
		},
		"a Certificate that is not Ready gives cert-manager's reason and message": {
			annotations: injected,
			cert: certificate(certmanagerv1.CertificateStatus{Conditions: []certmanagerv1.CertificateCondition{
				ready(cmmeta.ConditionFalse, "DoesNotExist", `Issuer "ca" not found`),
			}}),
			want: `Certificate hooks/serving is not Ready: DoesNotExist: Issuer "ca" not found`,
		},
		"a Certificate never issued says so": {
			annotations: injected,
			cert:        certificate(certmanagerv1.CertificateStatus{}),
			want:        "Certificate hooks/serving is not Ready: it has no Ready condition yet; cert-manager has not issued it",
		},
		"a Ready condition from an older generation is flagged": {
			annotations: injected,
			cert: certificate(certmanagerv1.CertificateStatus{Conditions: []certmanagerv1.CertificateCondition{
				{Type: certmanagerv1.CertificateConditionReady, Status: cmmeta.ConditionUnknown, ObservedGeneration: 2},
			}}),
			want: "Certificate hooks/serving is not Ready: Ready is Unknown with no reason given (condition from generation 2; the Certificate is at 3 and not yet reconciled)",
		},
		"an expired Certificate gives its expiry and why renewal failed": {
			annotations: injected,
			cert: certificate(certmanagerv1.CertificateStatus{
				NotAfter:   at(-time.Hour),
				Conditions: []certmanagerv1.CertificateCondition{ready(cmmeta.ConditionFalse, "Expired", "Certificate expired on Sun, 30 Nov 2026 11:00:00 UTC")},
			}),
			want: "Certificate hooks/serving expired at 2026-11-30T11:00:00Z and is not Ready: Expired: Certificate expired on Sun, 30 Nov 2026 11:00:00 UTC",
		},
		"an expired Certificate still marked Ready gives its expiry": {
			annotations: injected,
			cert: certificate(certmanagerv1.CertificateStatus{
				NotAfter:   at(0),
				Conditions: []certmanagerv1.CertificateCondition{ready(cmmeta.ConditionTrue, "Ready", "Certificate is up to date and has not expired")},
			}),
			want: "Certificate hooks/serving expired at 2026-11-30T12:00:00Z",
		},
		"a Certificate not yet valid gives its start": {
			annotations: injected,
			cert: certificate(certmanagerv1.CertificateStatus{
				NotBefore:  at(time.Hour),
				NotAfter:   at(90 * 24 * time.Hour),
				Conditions: []certmanagerv1.CertificateCondition{ready(cmmeta.ConditionTrue, "Ready", "")},
			}),
			want: "Certificate hooks/serving is not valid before 2026-11-30T13:00:00Z",
		},
		"a Certificate being re-issued may have a caBundle that lags": {
			annotations: injected,
			cert: certificate(certmanagerv1.CertificateStatus{
				NotAfter: at(24 * time.Hour),
				Conditions: []certmanagerv1.CertificateCondition{
					ready(cmmeta.ConditionTrue, "Ready", "Certificate is up to date and has not expired"),
					{Type: certmanagerv1.CertificateConditionIssuing, Status: cmmeta.ConditionTrue, Reason: "Renewing", Message: "Renewing certificate as renewal was scheduled"},
				},
			}),
			want: "Certificate hooks/serving is Ready and valid until 2026-12-01T12:00:00Z but is being re-issued (Renewing: Renewing certificate as renewal was scheduled); until cert-manager injects the new CA, the caBundle may not match the served certificate",
		},
		"a Ready and valid Certificate points elsewhere": {
			annotations: injected,
			cert: certificate(certmanagerv1.CertificateStatus{
				NotBefore:  at(-24 * time.Hour),
				NotAfter:   at(60 * 24 * time.Hour),
				Conditions: []certmanagerv1.CertificateCondition{ready(cmmeta.ConditionTrue, "Ready", "Certificate is up to date and has not expired")},
			}),
			want: "Certificate hooks/serving is Ready and valid until 2027-01-29T12:00:00Z; the TLS failure has another cause",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := runtime.NewScheme()
			require.NoError(t, certmanagerv1.AddToScheme(s))
			b := fake.NewClientBuilder().WithScheme(s)
			if tc.cert != nil {
				b = b.WithObjects(tc.cert)
			}
			assert.Equal(t, tc.want, DiagnoseInjectedCA(t.Context(), b.Build(), tc.annotations, now))
		})
	}
}

func TestDiagnoseInjectedCA_unreadableCertificate(t *testing.T) {
	cases := map[string]struct {
		err  error
		want string
	}{
		"missing RBAC must not read as a cert-manager fault": {
			err:  apierrors.NewForbidden(certmanagerv1.Resource("certificates"), "serving", nil),
			want: "Certificate hooks/serving named by annotation cert-manager.io/inject-ca-from could not be read: certificates.cert-manager.io \"serving\" is forbidden",
		},
		"a cluster without cert-manager says so": {
			err:  &meta.NoKindMatchError{GroupKind: certmanagerv1.SchemeGroupVersion.WithKind("Certificate").GroupKind()},
			want: "Certificate hooks/serving named by annotation cert-manager.io/inject-ca-from cannot exist: cert-manager's Certificate API is not installed",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := runtime.NewScheme()
			require.NoError(t, certmanagerv1.AddToScheme(s))
			c := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
				Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
					return tc.err
				},
			}).Build()
			got := DiagnoseInjectedCA(t.Context(), c, map[string]string{InjectCAFromAnnotation: "hooks/serving"}, time.Now())
			assert.Contains(t, got, tc.want)
		})
	}
}
