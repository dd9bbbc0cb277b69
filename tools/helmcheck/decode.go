package main

import (
	"errors"
	"fmt"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Objects are the rendered objects, decoded into their API types.
type Objects struct {
	Deployments     []*appsv1.Deployment
	Services        []*corev1.Service
	Secrets         []*corev1.Secret
	ServiceAccounts []*corev1.ServiceAccount
	PDBs            []*policyv1.PodDisruptionBudget
	HPAs            []*autoscalingv2.HorizontalPodAutoscaler
	NetworkPolicies []*networkingv1.NetworkPolicy
	ServiceMonitors []*monitoringv1.ServiceMonitor
	Certificates    []*Certificate
}

// Count is how many objects were decoded.
func (o *Objects) Count() int {
	return len(o.Deployments) + len(o.Services) + len(o.Secrets) + len(o.ServiceAccounts) + len(o.PDBs) +
		len(o.HPAs) + len(o.NetworkPolicies) + len(o.ServiceMonitors) + len(o.Certificates)
}

// Decode decodes every document strictly into its Go API type: an unknown
// or misspelled field, a duplicate key, a wrong type or a kind the chart is
// not expected to render fails, as the API server's strict field validation
// would reject it at install time.
func Decode(docs []Doc) (*Objects, error) {
	o := &Objects{}
	var errs []error
	for _, d := range docs {
		if err := o.decode(d); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.Source, err))
		}
	}
	return o, errors.Join(errs...)
}

func (o *Objects) decode(d Doc) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(d.YAML), &tm); err != nil {
		return fmt.Errorf("not an object: %w", err)
	}
	into := func(dst any, add func()) error {
		if err := yaml.UnmarshalStrict([]byte(d.YAML), dst); err != nil {
			return fmt.Errorf("%s %s: %w", tm.APIVersion, tm.Kind, err)
		}
		add()
		return nil
	}
	switch tm.APIVersion + "/" + tm.Kind {
	case "apps/v1/Deployment":
		x := &appsv1.Deployment{}
		return into(x, func() { o.Deployments = append(o.Deployments, x) })
	case "v1/Service":
		x := &corev1.Service{}
		return into(x, func() { o.Services = append(o.Services, x) })
	case "v1/Secret":
		x := &corev1.Secret{}
		return into(x, func() { o.Secrets = append(o.Secrets, x) })
	case "v1/ServiceAccount":
		x := &corev1.ServiceAccount{}
		return into(x, func() { o.ServiceAccounts = append(o.ServiceAccounts, x) })
	case "policy/v1/PodDisruptionBudget":
		x := &policyv1.PodDisruptionBudget{}
		return into(x, func() { o.PDBs = append(o.PDBs, x) })
	case "autoscaling/v2/HorizontalPodAutoscaler":
		x := &autoscalingv2.HorizontalPodAutoscaler{}
		return into(x, func() { o.HPAs = append(o.HPAs, x) })
	case "networking.k8s.io/v1/NetworkPolicy":
		x := &networkingv1.NetworkPolicy{}
		return into(x, func() { o.NetworkPolicies = append(o.NetworkPolicies, x) })
	case "monitoring.coreos.com/v1/ServiceMonitor":
		x := &monitoringv1.ServiceMonitor{}
		return into(x, func() { o.ServiceMonitors = append(o.ServiceMonitors, x) })
	case "cert-manager.io/v1/Certificate":
		x := &Certificate{}
		return into(x, func() { o.Certificates = append(o.Certificates, x) })
	default:
		return fmt.Errorf("unexpected object %s %s (add its type to the check)", tm.APIVersion, tm.Kind)
	}
}

// Certificate mirrors the cert-manager.io/v1 Certificate fields the chart
// sets (names and JSON tags as in cert-manager's API), so a misspelled field
// fails the strict decode without importing cert-manager's module.
type Certificate struct {
	metav1.TypeMeta
	metav1.ObjectMeta `json:"metadata"`
	Spec              CertificateSpec `json:"spec"`
}

// CertificateSpec is the subset of cert-manager's CertificateSpec the chart uses.
type CertificateSpec struct {
	SecretName  string               `json:"secretName"`
	Duration    *metav1.Duration     `json:"duration,omitempty"`
	RenewBefore *metav1.Duration     `json:"renewBefore,omitempty"`
	CommonName  string               `json:"commonName,omitempty"`
	Subject     *CertificateSubject  `json:"subject,omitempty"`
	DNSNames    []string             `json:"dnsNames,omitempty"`
	URIs        []string             `json:"uris,omitempty"`
	IPAddresses []string             `json:"ipAddresses,omitempty"`
	Usages      []string             `json:"usages,omitempty"`
	PrivateKey  *CertificatePrivKey  `json:"privateKey,omitempty"`
	IssuerRef   CertificateIssuerRef `json:"issuerRef"`
}

// CertificateSubject is cert-manager's X509Subject (the fields used).
type CertificateSubject struct {
	Organizations       []string `json:"organizations,omitempty"`
	OrganizationalUnits []string `json:"organizationalUnits,omitempty"`
}

// CertificatePrivKey is cert-manager's CertificatePrivateKey.
type CertificatePrivKey struct {
	Algorithm      string `json:"algorithm,omitempty"`
	Size           int    `json:"size,omitempty"`
	RotationPolicy string `json:"rotationPolicy,omitempty"`
	Encoding       string `json:"encoding,omitempty"`
}

// CertificateIssuerRef is cert-manager's ObjectReference to an issuer.
type CertificateIssuerRef struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}
