package deploy

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	klabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/admin"
	"github.com/handoff-go/handoff/runtime"
)

// stopTail is what a stop takes besides the drain, the hard stop's grace
// and the servers' shutdown: the snapshot write, the final commit, the
// group leave and closing readers (docs/operating.md, "Fitting the
// termination grace period").
const stopTail = 4 * time.Second

// objects are the manifests of kubernetes/, decoded strictly.
type objects struct {
	workloads []workload
	services  []*corev1.Service
	pdbs      []*policyv1.PodDisruptionBudget
	netpols   []*networkingv1.NetworkPolicy
}

// workload is a Deployment or a StatefulSet: what the checks need of it.
type workload struct {
	file, kind string
	selector   *metav1.LabelSelector
	template   corev1.PodTemplateSpec
	claims     []corev1.PersistentVolumeClaim // a StatefulSet's
	service    string                         // a StatefulSet's serviceName
}

// decodeManifests decodes every YAML document of kubernetes/*.yaml into
// its Kubernetes API type, strictly: an unknown or duplicated field, a
// wrong type or an unknown kind is an error.
func decodeManifests(t *testing.T) objects {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var o objects
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(b, []byte("\n---")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			where := fmt.Sprintf("%s document %d", f, i+1)
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			strict := func(v any) {
				if err := yaml.UnmarshalStrict(doc, v); err != nil {
					t.Errorf("%s (%s %s): %v", where, tm.APIVersion, tm.Kind, err)
				}
			}
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 Deployment":
				var d appsv1.Deployment
				strict(&d)
				o.workloads = append(o.workloads, workload{file: f, kind: tm.Kind, selector: d.Spec.Selector, template: d.Spec.Template})
			case "apps/v1 StatefulSet":
				var s appsv1.StatefulSet
				strict(&s)
				o.workloads = append(o.workloads, workload{file: f, kind: tm.Kind, selector: s.Spec.Selector, template: s.Spec.Template,
					claims: s.Spec.VolumeClaimTemplates, service: s.Spec.ServiceName})
			case "v1 Service":
				var s corev1.Service
				strict(&s)
				o.services = append(o.services, &s)
			case "policy/v1 PodDisruptionBudget":
				var p policyv1.PodDisruptionBudget
				strict(&p)
				o.pdbs = append(o.pdbs, &p)
			case "networking.k8s.io/v1 NetworkPolicy":
				var p networkingv1.NetworkPolicy
				strict(&p)
				o.netpols = append(o.netpols, &p)
			default:
				t.Errorf("%s: unexpected %s %s", where, tm.APIVersion, tm.Kind)
			}
		}
	}
	return o
}

// rentalFlags returns the flags the rental binary takes, from its -h.
func rentalFlags(t *testing.T) map[string]bool {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH: cannot build examples/rental to check the manifests' flags")
	}
	bin := filepath.Join(t.TempDir(), "rental")
	// examples is a module of the root's go.work, which this module is
	// not in: build it from the root, in the workspace.
	build := exec.Command("go", "build", "-o", bin, "./examples/rental")
	build.Dir = ".."
	build.Env = append(os.Environ(), "GOWORK=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build rental (go build ./examples/rental at the root): %v\n%s", err, out)
	}
	out, _ := exec.Command(bin, "-h").CombinedOutput() // -h exits 2
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["brokers"] || !flags["probes"] {
		t.Fatalf("rental -h lists no -brokers or -probes:\n%s", out)
	}
	return flags
}

// TestManifests: every manifest decodes strictly into its API type, and
// what the runtime needs of it holds: the selectors select the pods, the
// image is this version's, every argument is a rental flag, the probes
// reach /livez and /readyz on a port the kubelet reaches (not loopback)
// while the admin API stays on loopback, the termination grace fits the
// stop (the changelog write included), the state file is on a volume of
// the pod's own (a Deployment's never a shared claim, a StatefulSet's a
// claim of the pod), a Deployment never keeps its state locally only, and
// static membership is used only where the pod's name is stable (a
// StatefulSet, -instance from the pod's name).
func TestManifests(t *testing.T) {
	o := decodeManifests(t)
	if len(o.workloads) != 2 || len(o.services) == 0 || len(o.pdbs) == 0 {
		t.Fatalf("%d workloads, %d services, %d disruption budgets: want a Deployment, a StatefulSet, a Service and a PodDisruptionBudget",
			len(o.workloads), len(o.services), len(o.pdbs))
	}
	flags := rentalFlags(t)
	for _, w := range o.workloads {
		t.Run(w.kind, func(t *testing.T) { checkWorkload(t, w, flags, o) })
	}
}

func checkWorkload(t *testing.T, w workload, flags map[string]bool, o objects) {
	pods := klabels.Set(w.template.Labels)
	sel, err := metav1.LabelSelectorAsSelector(w.selector)
	if err != nil || sel.Empty() || !sel.Matches(pods) {
		t.Errorf("%s: selector %v does not select its pods' labels %v (%v)", w.file, w.selector, pods, err)
	}
	for _, p := range o.pdbs {
		if s, err := metav1.LabelSelectorAsSelector(p.Spec.Selector); err != nil || !s.Matches(pods) {
			t.Errorf("PodDisruptionBudget %s does not select the pods of %s", p.Name, w.file)
		}
	}
	var metricsSvc *corev1.Service
	for _, s := range o.services {
		if klabels.SelectorFromSet(s.Spec.Selector).Matches(pods) {
			metricsSvc = s
		}
	}
	if metricsSvc == nil {
		t.Fatalf("no Service selects the pods of %s", w.file)
	}
	if w.kind == "StatefulSet" && w.service != metricsSvc.Name {
		t.Errorf("%s: serviceName %q names no Service of its pods", w.file, w.service)
	}

	spec := w.template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", w.file, len(spec.Containers))
	}
	c := spec.Containers[0]
	if !strings.HasSuffix(c.Image, ":"+handoff.Version) {
		t.Errorf("%s: image %q is not tagged with this version, %s", w.file, c.Image, handoff.Version)
	}
	args := map[string]string{}
	for _, a := range c.Args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || !ok {
			t.Errorf("%s: argument %q is not -flag=value", w.file, a)
			continue
		}
		if !flags[name] {
			t.Errorf("%s: rental has no flag -%s", w.file, name)
		}
		args[name] = value
	}

	// Probes: on a named container port, the one -probes listens on, on
	// every interface; the admin API on loopback only.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	host, port, err := net.SplitHostPort(args["probes"])
	if err != nil || (host != "0.0.0.0" && host != "[::]" && host != "::") {
		t.Errorf("%s: -probes=%q: the kubelet and Prometheus need it on every interface (0.0.0.0:PORT)", w.file, args["probes"])
	}
	for name, pr := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		want := map[string]string{"liveness": "/livez", "readiness": "/readyz"}[name]
		if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != want {
			t.Errorf("%s: %s probe must GET %s", w.file, name, want)
			continue
		}
		if got := ports[pr.HTTPGet.Port.StrVal]; got == 0 || strconv.Itoa(int(got)) != port {
			t.Errorf("%s: %s probe port %q is not the container port -probes listens on (%s)", w.file, name, pr.HTTPGet.Port.String(), port)
		}
	}
	if tp := metricsSvc.Spec.Ports[0].TargetPort; ports[tp.StrVal] == 0 {
		t.Errorf("Service %s targets port %q, which the container of %s does not name", metricsSvc.Name, tp.String(), w.file)
	}
	if ah, _, err := net.SplitHostPort(args["admin"]); args["admin"] != "" && (err != nil || ah != "127.0.0.1") {
		t.Errorf("%s: -admin=%q: the admin API shows messages; keep it on 127.0.0.1 (kubectl port-forward reaches it)", w.file, args["admin"])
	}
	if args["admin-token"] != "" {
		t.Errorf("%s: -admin-token puts the token in the pod's command line: use -admin-token-file", w.file)
	}

	// The termination grace fits the stop.
	drain := runtime.DefaultDrainTimeout
	if v, ok := args["drain-timeout"]; ok {
		if drain, err = time.ParseDuration(v); err != nil {
			t.Fatalf("%s: -drain-timeout=%q: %v", w.file, v, err)
		}
	}
	localOnly := false
	if v, ok := args["local-state-only"]; ok {
		if localOnly, err = strconv.ParseBool(v); err != nil {
			t.Fatalf("%s: -local-state-only=%q: %v", w.file, v, err)
		}
	}
	changelog := runtime.DefaultChangelogTimeout // the stop's changelog write
	if v, ok := args["changelog-timeout"]; ok {
		if changelog, err = time.ParseDuration(v); err != nil {
			t.Fatalf("%s: -changelog-timeout=%q: %v", w.file, v, err)
		}
	}
	if localOnly {
		changelog = 0
	}
	need := drain + runtime.DefaultHardStopGrace + changelog + stopTail + admin.ShutdownTimeout + preStop(t, c)
	var grace time.Duration // Kubernetes' default is 30s
	if g := spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	} else {
		grace = 30 * time.Second
	}
	if grace < need {
		t.Errorf("%s: terminationGracePeriodSeconds %s is below the stop's %s (drain %s + hard stop grace %s + changelog write %s + %s + server shutdown %s + preStop)",
			w.file, grace, need, drain, runtime.DefaultHardStopGrace, changelog, stopTail, admin.ShutdownTimeout)
	}

	// The state file is on a volume of the pod's own; static membership
	// only with a name that is the pod's.
	mounted := false
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(args["state"], strings.TrimSuffix(m.MountPath, "/")+"/") {
			continue
		}
		mounted = true
		switch w.kind {
		case "Deployment":
			i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
			if i < 0 {
				t.Errorf("%s: the state file's volume %q is not among the pod's volumes", w.file, m.Name)
			} else if spec.Volumes[i].PersistentVolumeClaim != nil {
				t.Errorf("%s: the state file's volume %q is a claim that every replica would share: each instance needs its own file (an emptyDir; the changelog restores it)", w.file, m.Name)
			}
		case "StatefulSet":
			if !slices.ContainsFunc(w.claims, func(p corev1.PersistentVolumeClaim) bool { return p.Name == m.Name }) {
				t.Errorf("%s: the state file's volume %q is not a volumeClaimTemplate: it would not survive the pod, which is the StatefulSet's point (a short restore; the only copy with -local-state-only)", w.file, m.Name)
			}
		}
	}
	if !mounted {
		t.Errorf("%s: -state=%q is on no volume", w.file, args["state"])
	}
	checkHardening(t, w, c)
	inst, static := args["instance"]
	switch w.kind {
	case "Deployment":
		if static {
			t.Errorf("%s: -instance on a Deployment: its pods are renamed at each rollout, and a static member leaves a ghost until its session times out", w.file)
		}
		if localOnly {
			t.Errorf("%s: -local-state-only on a Deployment: its state file does not survive its pod, and without the changelog that file is the only copy of the dead letters, parked, delayed and saved messages", w.file)
		}
	case "StatefulSet":
		if args["client"] != "franz-go" || inst != "$(POD_NAME)" {
			t.Errorf("%s: a StatefulSet's restarts keep their partitions with -client=franz-go -instance=$(POD_NAME); got client %q instance %q", w.file, args["client"], inst)
		}
		var fromPod bool
		for _, e := range c.Env {
			fromPod = fromPod || (e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name")
		}
		if !fromPod {
			t.Errorf("%s: POD_NAME is not set from metadata.name", w.file)
		}
	}
}

// checkHardening: the pod mounts no service account token, every
// emptyDir has a size limit, the container has CPU and memory requests
// and a memory limit at least its request, and GOMEMLIMIT is the memory
// limit in bytes (the downward API, divisor 1: Go reads a plain number as
// bytes).
func checkHardening(t *testing.T, w workload, c corev1.Container) {
	spec := w.template.Spec
	if a := spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("%s: automountServiceAccountToken is not false: the pod needs no Kubernetes API token", w.file)
	}
	for _, v := range spec.Volumes {
		if v.EmptyDir != nil && (v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.IsZero()) {
			t.Errorf("%s: emptyDir %q has no sizeLimit: a runaway state file would fill the node's disk", w.file, v.Name)
		}
	}
	req, lim := c.Resources.Requests, c.Resources.Limits
	if req.Cpu().IsZero() || req.Memory().IsZero() || lim.Memory().IsZero() || lim.Memory().Cmp(*req.Memory()) < 0 {
		t.Errorf("%s: resources %v: want CPU and memory requests and a memory limit at least the request", w.file, c.Resources)
	}
	var gomem *corev1.EnvVar
	for i, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			gomem = &c.Env[i]
		}
	}
	switch {
	case gomem == nil:
		t.Errorf("%s: no GOMEMLIMIT: the Go runtime does not know the container's memory limit", w.file)
	case gomem.ValueFrom == nil || gomem.ValueFrom.ResourceFieldRef == nil:
		t.Errorf("%s: GOMEMLIMIT is not from the downward API's resourceFieldRef: %+v", w.file, gomem)
	default:
		ref := gomem.ValueFrom.ResourceFieldRef
		if ref.Resource != "limits.memory" || (ref.ContainerName != "" && ref.ContainerName != c.Name) ||
			(!ref.Divisor.IsZero() && ref.Divisor.Value() != 1) {
			t.Errorf("%s: GOMEMLIMIT from %+v: want limits.memory of container %s in bytes (divisor 1)", w.file, ref, c.Name)
		}
	}
}

// TestNetworkPolicy: a NetworkPolicy isolates rental's pods for ingress
// and lets in only TCP to the probes port (the one -probes listens on,
// which the Service names for Prometheus), from pods it selects, never
// from everywhere; no rule opens the admin port or all ports.
func TestNetworkPolicy(t *testing.T) {
	o := decodeManifests(t)
	if len(o.netpols) != 1 {
		t.Fatalf("%d NetworkPolicies, want 1", len(o.netpols))
	}
	np := o.netpols[0]
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Errorf("NetworkPolicy %s: policyTypes %v lack Ingress", np.Name, np.Spec.PolicyTypes)
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range o.workloads {
		if sel.Empty() || !sel.Matches(klabels.Set(w.template.Labels)) {
			t.Errorf("NetworkPolicy %s does not select the pods of %s (or selects every pod)", np.Name, w.file)
		}
		c := w.template.Spec.Containers[0]
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		for i, r := range np.Spec.Ingress {
			if len(r.From) == 0 || len(r.Ports) == 0 {
				t.Errorf("NetworkPolicy %s rule %d: from anywhere or to every port", np.Name, i)
			}
			for _, f := range r.From {
				if f.IPBlock != nil || (f.PodSelector == nil && f.NamespaceSelector == nil) {
					t.Errorf("NetworkPolicy %s rule %d: a peer %+v that is not a selection of pods", np.Name, i, f)
				}
			}
			for _, p := range r.Ports {
				var port int32
				if p.Port != nil {
					port = p.Port.IntVal
					if p.Port.Type == intstr.String {
						port = ports[p.Port.StrVal]
					}
				}
				if port == 0 || port != ports["probes"] || p.EndPort != nil {
					t.Errorf("NetworkPolicy %s rule %d opens port %v of %s: only the probes port (%d)", np.Name, i, p.Port, w.file, ports["probes"])
				}
			}
		}
	}
}

// preStop returns how long the container's preStop hook may take: a
// sleep action's, or an exec "sleep N"'s; zero without a hook.
func preStop(t *testing.T, c corev1.Container) time.Duration {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return 0
	}
	h := c.Lifecycle.PreStop
	switch {
	case h.Sleep != nil:
		return time.Duration(h.Sleep.Seconds) * time.Second
	case h.Exec != nil && len(h.Exec.Command) == 2 && h.Exec.Command[0] == "sleep":
		n, err := strconv.Atoi(h.Exec.Command[1])
		if err == nil {
			return time.Duration(n) * time.Second
		}
	}
	t.Errorf("container %s: a preStop hook whose duration the test cannot tell", c.Name)
	return 0
}

// TestManifestsStrictCatches: the strict decoding the manifests pass
// rejects a misspelled field, which a plain decoding drops silently.
func TestManifestsStrictCatches(t *testing.T) {
	doc := []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replicas: 1\n  templte: {}\n")
	var d appsv1.Deployment
	if err := yaml.Unmarshal(doc, &d); err != nil {
		t.Fatalf("plain decoding: %v", err)
	}
	if err := yaml.UnmarshalStrict(doc, &d); err == nil || !strings.Contains(err.Error(), "templte") {
		t.Errorf("strict decoding of a misspelled field: %v", err)
	}
}
