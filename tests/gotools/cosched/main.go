// kube-scheduler with one out-of-tree plugin registered: Coscheduling, which holds a
// PodGroup's pods at Permit until minMember of them fit and then binds them together (gang
// scheduling). Upstream's cmd/scheduler links every scheduler-plugins plugin; the cluster
// only needs this one, and fewer packages build faster. Which plugins run, and under which
// scheduler name, is the --config file scripts/cluster.sh writes.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // REST client metrics, as kube-scheduler's main registers them
	_ "k8s.io/component-base/metrics/prometheus/version"  // the build-info metric
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	// Registers CoschedulingArgs (pluginConfig args: permitWaitingTimeSeconds, ...) with the
	// KubeSchedulerConfiguration decoder; without it --config cannot name the plugin's args.
	_ "sigs.k8s.io/scheduler-plugins/apis/config/scheme"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(coscheduling.Name, coscheduling.New))
	os.Exit(cli.Run(command))
}
