package deploy

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
)

// TestManifestsRestricted: the pod template of every manifest passes the
// Pod Security Standard "restricted" at its latest version, checked by
// k8s.io/pod-security-admission, the checks the API server's admission
// runs for a namespace labelled pod-security.kubernetes.io/enforce=restricted.
// Before, the Deployment and the StatefulSet were refused (no
// seccompProfile), while the README (now docs/operating.md) said they
// apply as they are.
func TestManifestsRestricted(t *testing.T) {
	o := decodeManifests(t)
	if len(o.workloads) == 0 {
		t.Fatal("no manifest with a pod template")
	}
	eval, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	for _, w := range o.workloads {
		res := psapolicy.AggregateCheckResults(eval.EvaluatePod(restricted, &w.template.ObjectMeta, &w.template.Spec))
		if !res.Allowed {
			t.Errorf("%s (%s): refused by Pod Security %q: %s", w.file, w.kind, restricted, res.ForbiddenDetail())
		}
	}
}

// TestRestrictedCheckCatches: the check TestManifestsRestricted runs
// refuses a pod without a seccomp profile, which the baseline allows.
func TestRestrictedCheckCatches(t *testing.T) {
	eval, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	no, yes := false, true
	spec := corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes},
		Containers: []corev1.Container{{Name: "c", Image: "x", SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
	}
	lv := func(l psaapi.Level) psaapi.LevelVersion {
		return psaapi.LevelVersion{Level: l, Version: psaapi.LatestVersion()}
	}
	if res := psapolicy.AggregateCheckResults(eval.EvaluatePod(lv(psaapi.LevelBaseline), &metav1.ObjectMeta{}, &spec)); !res.Allowed {
		t.Errorf("baseline refused the pod: %s", res.ForbiddenDetail())
	}
	res := psapolicy.AggregateCheckResults(eval.EvaluatePod(lv(psaapi.LevelRestricted), &metav1.ObjectMeta{}, &spec))
	if res.Allowed || res.ForbiddenReason() != "seccompProfile" {
		t.Errorf("restricted on a pod without a seccomp profile: allowed %v, reasons %q", res.Allowed, res.ForbiddenReason())
	}
	spec.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	if res := psapolicy.AggregateCheckResults(eval.EvaluatePod(lv(psaapi.LevelRestricted), &metav1.ObjectMeta{}, &spec)); !res.Allowed {
		t.Errorf("restricted refused the pod with RuntimeDefault: %s", res.ForbiddenDetail())
	}
}
