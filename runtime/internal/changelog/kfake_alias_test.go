package changelog

import "github.com/twmb/franz-go/pkg/kfake"

type (
	kfakeCluster = kfake.Cluster
	kfakeFault   = kfake.Fault
)
