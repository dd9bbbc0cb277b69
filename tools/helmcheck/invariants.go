package main

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Budgets the grace period must cover beyond the drains (docs/operations.md):
// a broker's listeners close after its drain, letting requests still in
// flight finish for up to 10 s, and the member deregisters last, within 5 s.
const (
	listenerGrace    = 10 * time.Second
	deregisterBudget = 5 * time.Second
)

// Checker holds what the invariants are checked against.
type Checker struct {
	// Env is, per binary (image name), the variables it reads.
	Env map[string]map[string]bool
	// ExternalSecrets are Secrets the values say exist outside the chart
	// (existingSecret, secretName).
	ExternalSecrets map[string]bool
}

// Check runs every invariant over the decoded objects and returns every
// violation found (not just the first).
func (c *Checker) Check(o *Objects) error {
	var errs []error
	secrets := c.secretKeys(o)
	for _, d := range o.Deployments {
		errs = append(errs, c.checkDeployment(d, o, secrets)...)
	}
	errs = append(errs, checkServices(o)...)
	errs = append(errs, checkSelectors(o)...)
	return errors.Join(errs...)
}

// secretKeys maps every Secret that will exist to its keys (nil keys: any
// key, for Secrets made outside the chart or by cert-manager).
func (c *Checker) secretKeys(o *Objects) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for name := range c.ExternalSecrets {
		out[name] = nil
	}
	for _, cert := range o.Certificates {
		out[cert.Spec.SecretName] = map[string]bool{"tls.crt": true, "tls.key": true, "ca.crt": true}
	}
	for _, s := range o.Secrets {
		keys := map[string]bool{}
		for k := range s.StringData {
			keys[k] = true
		}
		for k := range s.Data {
			keys[k] = true
		}
		out[s.Name] = keys
	}
	return out
}

func (c *Checker) checkDeployment(d *appsv1.Deployment, o *Objects, secrets map[string]map[string]bool) []error {
	var errs []error
	where := "Deployment " + d.Name
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		errs = append(errs, fmt.Errorf("%s: selector %v does not match its pod template's labels %v", where, d.Spec.Selector, d.Spec.Template.Labels))
	}
	pod := &d.Spec.Template.Spec
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		errs = append(errs, fmt.Errorf("%s: pod does not set runAsNonRoot", where))
	}
	// runAsUser 0 beside runAsNonRoot: the kubelet refuses to start the
	// container (CreateContainerConfigError), so no pod ever runs.
	if sc := pod.SecurityContext; sc != nil && sc.RunAsUser != nil && *sc.RunAsUser == 0 {
		errs = append(errs, fmt.Errorf("%s: pod runs as user 0 (root); the images run as 65532", where))
	}
	for i := range pod.Containers {
		if sc := pod.Containers[i].SecurityContext; sc != nil && sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			errs = append(errs, fmt.Errorf("%s: container %s runs as user 0 (root); the images run as 65532", where, pod.Containers[i].Name))
		}
	}
	for i := range pod.Containers {
		ctr := &pod.Containers[i]
		w := fmt.Sprintf("%s container %s", where, ctr.Name)
		errs = append(errs, checkProbes(w, ctr)...)
		errs = append(errs, c.checkEnv(w, ctr)...)
		errs = append(errs, checkGrace(w, pod, ctr)...)
		errs = append(errs, checkResources(w, ctr)...)
		errs = append(errs, checkSecretRefs(w, pod, ctr, secrets)...)
		errs = append(errs, checkMounts(w, pod, ctr)...)
	}
	if pod.Subdomain != "" && !headlessSelects(o, pod.Subdomain, d.Spec.Template.Labels) {
		errs = append(errs, fmt.Errorf("%s: subdomain %q is no headless Service selecting its pods (pod DNS names would not resolve)", where, pod.Subdomain))
	}
	return errs
}

// binaryOf names the container's binary: converge for the chart's converge
// container (whatever registry it is pulled from), else the image's last
// path element (stdworker, classic-worker, or a worker of the user's own).
func binaryOf(ctr *corev1.Container) string {
	if ctr.Name == "converge" {
		return "converge"
	}
	repo := ctr.Image
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	return path.Base(repo)
}

func portExists(ctr *corev1.Container, p intstr.IntOrString) bool {
	for _, cp := range ctr.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return true
		}
	}
	return false
}

func checkProbes(where string, ctr *corev1.Container) []error {
	var errs []error
	// /readyz fails while the database (a converge pod) or every broker (a
	// worker) is away: a startup or liveness probe on it would restart the
	// pods on a Postgres blip or a broker rollout. /livez answers while the
	// process runs.
	for _, pr := range []struct {
		name, path string
		p          *corev1.Probe
	}{{"startup", "/livez", ctr.StartupProbe}, {"liveness", "/livez", ctr.LivenessProbe}, {"readiness", "/readyz", ctr.ReadinessProbe}} {
		name, p := pr.name, pr.p
		if p == nil {
			continue
		}
		var port intstr.IntOrString
		switch {
		case p.HTTPGet != nil:
			port = p.HTTPGet.Port
			if p.HTTPGet.Path != pr.path {
				errs = append(errs, fmt.Errorf("%s: %s probe on %q, want %s", where, name, p.HTTPGet.Path, pr.path))
			}
		case p.TCPSocket != nil:
			port = p.TCPSocket.Port
		default:
			errs = append(errs, fmt.Errorf("%s: %s probe is neither HTTP nor TCP (the image has no shell for exec)", where, name))
			continue
		}
		if !portExists(ctr, port) {
			errs = append(errs, fmt.Errorf("%s: %s probe port %s is not a port of the container", where, name, port.String()))
		}
	}
	bin := binaryOf(ctr)
	if ctr.LivenessProbe == nil || ctr.ReadinessProbe == nil {
		errs = append(errs, fmt.Errorf("%s: %s needs liveness and readiness probes", where, bin))
	}
	// Every worker is built on the Go SDK (ours or the user's own image).
	if bin != "converge" && ctr.ReadinessProbe != nil {
		if _, ok := envValue(ctr, "WORKER_HEALTH_ADDR"); !ok {
			errs = append(errs, fmt.Errorf("%s: %s is probed but WORKER_HEALTH_ADDR is not set (the worker serves no probes without it)", where, bin))
		}
	}
	return errs
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkEnv: every variable is one the container's binary reads, or one the
// chart defines only to be expanded into another ($(POD_IP) in BROKER_URL);
// every $(NAME) refers to an earlier variable.
func (c *Checker) checkEnv(where string, ctr *corev1.Container) []error {
	bin := binaryOf(ctr)
	// An image of none of the project's binaries is a worker of the user's
	// own, built on the Go SDK (docs/deploy.md): the variables it reads are
	// its own, so only the rules below that need no source apply to it.
	reads, known := c.Env[bin]
	var errs []error
	referenced := map[string]bool{}
	defined := map[string]bool{}
	for _, e := range ctr.Env {
		for _, m := range envRef.FindAllStringSubmatch(e.Value, -1) {
			referenced[m[1]] = true
			if !defined[m[1]] {
				errs = append(errs, fmt.Errorf("%s: %s refers to $(%s), not defined before it", where, e.Name, m[1]))
			}
		}
		if defined[e.Name] {
			errs = append(errs, fmt.Errorf("%s: %s is set twice", where, e.Name))
		}
		defined[e.Name] = true
	}
	for _, e := range ctr.Env {
		if !known || reads[e.Name] || referenced[e.Name] {
			continue
		}
		errs = append(errs, fmt.Errorf("%s: env %s is not read by %s", where, e.Name, bin))
	}
	for _, e := range ctr.Env {
		if err := checkDuration(bin, e); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
	}
	return errs
}

// checkDuration refuses a cadence the binary would refuse at start: every
// *_DRAIN, *_TIMEOUT and *_INTERVAL variable of ours is a positive duration,
// and converge holds its cadences and windows to floors (convergeFloors).
func checkDuration(bin string, e corev1.EnvVar) error {
	floor, floored := convergeFloors[e.Name]
	floored = floored && bin == "converge"
	if !floored && !strings.HasSuffix(e.Name, "_DRAIN") && !strings.HasSuffix(e.Name, "_TIMEOUT") &&
		!strings.HasSuffix(e.Name, "_INTERVAL") {
		return nil
	}
	d, err := time.ParseDuration(e.Value)
	zeroOK := floored && convergeZeroAllowed[e.Name]
	switch {
	case err == nil && d == 0 && zeroOK:
		return nil
	case err != nil || d <= 0:
		return fmt.Errorf("%s=%q is not a positive duration", e.Name, e.Value)
	case floored:
		least, err := time.ParseDuration(floor)
		if err != nil {
			return fmt.Errorf("the floor of %s, %q, is not a duration: %w", e.Name, floor, err)
		}
		if d < least {
			return fmt.Errorf("%s=%q is below converge's floor of %s (converge refuses to start)", e.Name, e.Value, least)
		}
	}
	return nil
}

func envValue(ctr *corev1.Container, name string) (string, bool) {
	for _, e := range ctr.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// checkGrace: the pod's grace period covers the preStop sleep, the drain
// budget of what runs in it and the deregistration.
func checkGrace(where string, pod *corev1.PodSpec, ctr *corev1.Container) []error {
	grace := 30 * time.Second
	if pod.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	}
	var preStop time.Duration
	if l := ctr.Lifecycle; l != nil && l.PreStop != nil {
		if l.PreStop.Sleep == nil {
			return []error{fmt.Errorf("%s: preStop must be the sleep action (the image has no shell or sleep binary)", where)}
		}
		preStop = time.Duration(l.PreStop.Sleep.Seconds) * time.Second
	}
	role, _ := envValue(ctr, "ROLE")
	var need time.Duration
	var what string
	switch {
	case binaryOf(ctr) != "converge":
		d, ok := envValue(ctr, "WORKER_DRAIN_TIMEOUT")
		if !ok {
			return []error{fmt.Errorf("%s: set WORKER_DRAIN_TIMEOUT explicitly (the grace check needs it)", where)}
		}
		drain, err := time.ParseDuration(d)
		if err != nil {
			return nil // reported by checkEnv
		}
		need, what = preStop+drain, fmt.Sprintf("preStop %s + WORKER_DRAIN_TIMEOUT %s", preStop, drain)
	case role == "control":
		if preStop == 0 {
			return []error{fmt.Errorf("%s: a control pod needs the preStop sleep (endpoint removal race)", where)}
		}
		need, what = preStop+listenerGrace, fmt.Sprintf("preStop %s + the API's %s shutdown grace", preStop, listenerGrace)
	default:
		d, ok := envValue(ctr, "SHUTDOWN_DRAIN")
		if !ok {
			return []error{fmt.Errorf("%s: set SHUTDOWN_DRAIN explicitly on broker pods (the grace check needs it)", where)}
		}
		drain, err := time.ParseDuration(d)
		if err != nil {
			return nil
		}
		if preStop == 0 {
			return []error{fmt.Errorf("%s: a broker pod needs the preStop sleep (endpoint removal race)", where)}
		}
		need = preStop + drain + listenerGrace + deregisterBudget
		what = fmt.Sprintf("preStop %s + SHUTDOWN_DRAIN %s + the listeners' shutdown grace %s + deregistration %s", preStop, drain, listenerGrace, deregisterBudget)
	}
	if grace <= need {
		return []error{fmt.Errorf("%s: terminationGracePeriodSeconds %s does not exceed %s = %s", where, grace, what, need)}
	}
	return nil
}

func checkResources(where string, ctr *corev1.Container) []error {
	var errs []error
	if _, ok := ctr.Resources.Requests[corev1.ResourceCPU]; !ok {
		errs = append(errs, fmt.Errorf("%s: no cpu request", where))
	}
	if _, ok := ctr.Resources.Requests[corev1.ResourceMemory]; !ok {
		errs = append(errs, fmt.Errorf("%s: no memory request", where))
	}
	if _, ok := ctr.Resources.Limits[corev1.ResourceMemory]; !ok {
		errs = append(errs, fmt.Errorf("%s: no memory limit", where))
	}
	return errs
}

func hasKey(secrets map[string]map[string]bool, name, key string) error {
	keys, ok := secrets[name]
	switch {
	case !ok:
		return fmt.Errorf("secret %q is neither rendered, made by a Certificate, nor named in the values as existing", name)
	case keys != nil && key != "" && !keys[key]:
		return fmt.Errorf("secret %q has no key %q", name, key)
	}
	return nil
}

func checkSecretRefs(where string, pod *corev1.PodSpec, ctr *corev1.Container, secrets map[string]map[string]bool) []error {
	var errs []error
	for _, e := range ctr.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			r := e.ValueFrom.SecretKeyRef
			if err := hasKey(secrets, r.Name, r.Key); err != nil {
				errs = append(errs, fmt.Errorf("%s: env %s: %w", where, e.Name, err))
			}
		}
	}
	for _, e := range ctr.EnvFrom {
		if e.SecretRef != nil {
			if err := hasKey(secrets, e.SecretRef.Name, ""); err != nil {
				errs = append(errs, fmt.Errorf("%s: envFrom: %w", where, err))
			}
		}
	}
	for _, v := range pod.Volumes {
		for _, src := range secretSources(&v) {
			if len(src.items) == 0 {
				if err := hasKey(secrets, src.name, ""); err != nil {
					errs = append(errs, fmt.Errorf("%s: volume %s: %w", where, v.Name, err))
				}
			}
			for _, it := range src.items {
				if err := hasKey(secrets, src.name, it.Key); err != nil {
					errs = append(errs, fmt.Errorf("%s: volume %s: %w", where, v.Name, err))
				}
			}
		}
	}
	return errs
}

type secretSource struct {
	name  string
	items []corev1.KeyToPath
}

// secretSources are the Secrets a volume mounts: a secret volume's, or
// each secret source of a projected volume.
func secretSources(v *corev1.Volume) []secretSource {
	var out []secretSource
	if v.Secret != nil {
		out = append(out, secretSource{v.Secret.SecretName, v.Secret.Items})
	}
	if v.Projected != nil {
		for _, p := range v.Projected.Sources {
			if p.Secret != nil {
				out = append(out, secretSource{p.Secret.Name, p.Secret.Items})
			}
		}
	}
	return out
}

// checkMounts: every mount names a volume; a Secret mounted with subPath
// would never see a rotation (TLS hot reload), so none is.
func checkMounts(where string, pod *corev1.PodSpec, ctr *corev1.Container) []error {
	vols := map[string]*corev1.Volume{}
	for i := range pod.Volumes {
		vols[pod.Volumes[i].Name] = &pod.Volumes[i]
	}
	var errs []error
	for _, m := range ctr.VolumeMounts {
		v, ok := vols[m.Name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s: mount %s names no volume", where, m.Name))
		case len(secretSources(v)) > 0 && (m.SubPath != "" || m.SubPathExpr != ""):
			errs = append(errs, fmt.Errorf("%s: secret volume %s mounted with subPath (rotations would not reach the pod)", where, m.Name))
		}
	}
	return errs
}
