// Package deploy holds what runs a handoff service in production and the
// tests that check it: Kubernetes manifests (kubernetes/), Prometheus
// alert rules (prometheus/) and a Grafana dashboard (grafana/), checked
// strictly against the Kubernetes API types, the Prometheus rule and
// query parsers, and the metric families a real runtime registers.
//
// It is a module of its own so that the library's go.mod does not carry
// the Kubernetes and Prometheus modules these tests need; the root
// module's TestDeployModule runs its tests as part of go test ./....
package deploy
