package main

import (
	"errors"
	"fmt"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// selected lists the Deployments whose pods a label selector matches.
func selected(o *Objects, sel labels.Selector) []*appsv1.Deployment {
	var out []*appsv1.Deployment
	for _, d := range o.Deployments {
		if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			out = append(out, d)
		}
	}
	return out
}

func selectedBy(o *Objects, ls *metav1.LabelSelector) ([]*appsv1.Deployment, error) {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, fmt.Errorf("selector %v: %w", ls, err)
	}
	return selected(o, sel), nil
}

func headlessSelects(o *Objects, name string, podLabels map[string]string) bool {
	for _, s := range o.Services {
		if s.Name == name && s.Spec.ClusterIP == corev1.ClusterIPNone &&
			labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(podLabels)) {
			return true
		}
	}
	return false
}

// checkServices: a Service selects some pods, and every port's target is a
// port of every pod it selects.
func checkServices(o *Objects) []error {
	var errs []error
	for _, s := range o.Services {
		where := "Service " + s.Name
		if len(s.Spec.Selector) == 0 {
			errs = append(errs, fmt.Errorf("%s: no selector", where))
			continue
		}
		ds := selected(o, labels.SelectorFromSet(s.Spec.Selector))
		if len(ds) == 0 {
			errs = append(errs, fmt.Errorf("%s: selector %v matches no Deployment's pods", where, s.Spec.Selector))
		}
		for _, d := range ds {
			for _, p := range s.Spec.Ports {
				ok := false
				for i := range d.Spec.Template.Spec.Containers {
					ok = ok || portExists(&d.Spec.Template.Spec.Containers[i], p.TargetPort)
				}
				if !ok {
					errs = append(errs, fmt.Errorf("%s: port %s targets %s, which Deployment %s's pods do not expose", where, p.Name, p.TargetPort.String(), d.Name))
				}
			}
		}
	}
	return errs
}

// checkSelectors: PDBs, HPAs, NetworkPolicies and ServiceMonitors point at
// objects that exist.
func checkSelectors(o *Objects) []error {
	var errs []error
	for _, p := range o.PDBs {
		errs = append(errs, selectsSome(o, "PodDisruptionBudget "+p.Name, p.Spec.Selector))
	}
	for _, h := range o.HPAs {
		var target *appsv1.Deployment
		for _, d := range o.Deployments {
			if h.Spec.ScaleTargetRef.Kind == "Deployment" && d.Name == h.Spec.ScaleTargetRef.Name {
				target = d
			}
		}
		switch {
		case target == nil:
			errs = append(errs, fmt.Errorf("HorizontalPodAutoscaler %s: no Deployment %s", h.Name, h.Spec.ScaleTargetRef.Name))
		case target.Spec.Replicas != nil:
			errs = append(errs, fmt.Errorf("HorizontalPodAutoscaler %s: Deployment %s also sets replicas (each upgrade would reset the autoscaler)", h.Name, target.Name))
		}
	}
	for _, np := range o.NetworkPolicies {
		errs = append(errs, checkNetworkPolicy(o, np.Name, &np.Spec.PodSelector, peerSelectors(np.Spec.Ingress, np.Spec.Egress))...)
		errs = append(errs, checkPolicyPorts(o, np)...)
	}
	for _, sm := range o.ServiceMonitors {
		errs = append(errs, checkServiceMonitor(o, sm.Name, &sm.Spec.Selector, sm.Spec.Endpoints)...)
	}
	return errs
}

func checkNetworkPolicy(o *Objects, name string, pods *metav1.LabelSelector, peers []*metav1.LabelSelector) []error {
	var errs []error
	errs = append(errs, selectsSome(o, "NetworkPolicy "+name+" podSelector", pods))
	for _, p := range peers {
		errs = append(errs, selectsSome(o, fmt.Sprintf("NetworkPolicy %s peer podSelector %v", name, p.MatchLabels), p))
	}
	return errs
}

// peerSelectors are the in-namespace pod selectors of a policy's peers (a
// peer with a namespaceSelector, e.g. kube-dns, is outside the release).
func peerSelectors(in []networkingv1.NetworkPolicyIngressRule, out []networkingv1.NetworkPolicyEgressRule) []*metav1.LabelSelector {
	var sels []*metav1.LabelSelector
	for _, r := range in {
		for _, p := range r.From {
			if p.PodSelector != nil && p.NamespaceSelector == nil {
				sels = append(sels, p.PodSelector)
			}
		}
	}
	for _, r := range out {
		for _, p := range r.To {
			if p.PodSelector != nil && p.NamespaceSelector == nil {
				sels = append(sels, p.PodSelector)
			}
		}
	}
	return sels
}

func checkServiceMonitor(o *Objects, name string, sel *metav1.LabelSelector, endpoints []monitoringv1.Endpoint) []error {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return []error{fmt.Errorf("ServiceMonitor %s: %w", name, err)}
	}
	ports := map[string]bool{}
	n := 0
	for _, svc := range o.Services {
		if s.Matches(labels.Set(svc.Labels)) {
			n++
			for _, p := range svc.Spec.Ports {
				ports[p.Name] = true
			}
		}
	}
	if n == 0 {
		return []error{fmt.Errorf("ServiceMonitor %s: selects no Service", name)}
	}
	var errs []error
	for _, e := range endpoints {
		if !ports[e.Port] {
			errs = append(errs, fmt.Errorf("ServiceMonitor %s: endpoint port %q is on none of its Services", name, e.Port))
		}
	}
	if len(errs) > 0 {
		return []error{errors.Join(errs...)}
	}
	return nil
}

// selectsSome fails a selector that is invalid or matches no Deployment's pods.
func selectsSome(o *Objects, where string, ls *metav1.LabelSelector) error {
	ds, err := selectedBy(o, ls)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if len(ds) == 0 {
		return fmt.Errorf("%s: matches no Deployment's pods", where)
	}
	return nil
}

// checkPolicyPorts: every port a policy opens is one its pods listen on
// (ingress) or one the in-release peers it names listen on (egress); a
// port nothing listens on means the traffic meant for the real one is cut
// off wherever policies are enforced.
func checkPolicyPorts(o *Objects, np *networkingv1.NetworkPolicy) []error {
	var errs []error
	listens := func(ds []*appsv1.Deployment, p *networkingv1.NetworkPolicyPort) bool {
		if p.Port == nil {
			return true // every port
		}
		for _, d := range ds {
			for i := range d.Spec.Template.Spec.Containers {
				if portExists(&d.Spec.Template.Spec.Containers[i], *p.Port) {
					return true
				}
			}
		}
		return false
	}
	pods, err := selectedBy(o, &np.Spec.PodSelector)
	if err != nil || len(pods) == 0 {
		return nil // reported by checkNetworkPolicy
	}
	for _, r := range np.Spec.Ingress {
		for i := range r.Ports {
			if !listens(pods, &r.Ports[i]) {
				errs = append(errs, fmt.Errorf("NetworkPolicy %s ingress port %s: no container of the pods it selects listens on it", np.Name, r.Ports[i].Port.String()))
			}
		}
	}
	for _, r := range np.Spec.Egress {
		var peers []*appsv1.Deployment
		inRelease := false
		for _, to := range r.To {
			if to.PodSelector != nil && to.NamespaceSelector == nil {
				inRelease = true
				ds, err := selectedBy(o, to.PodSelector)
				if err != nil {
					return nil // reported by checkNetworkPolicy
				}
				peers = append(peers, ds...)
			}
		}
		if !inRelease {
			continue // DNS, the database, HTTPS: outside the release
		}
		for i := range r.Ports {
			if !listens(peers, &r.Ports[i]) {
				errs = append(errs, fmt.Errorf("NetworkPolicy %s egress port %s: no container of the peers it names listens on it", np.Name, r.Ports[i].Port.String()))
			}
		}
	}
	return errs
}
