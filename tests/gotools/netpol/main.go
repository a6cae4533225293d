// The real-node cluster's NetworkPolicy controller (scripts/cluster.sh): the controller of
// sigs.k8s.io/kube-network-policies (pkg/networkpolicy), run as a host process of the node.
// It watches Pods, Namespaces and NetworkPolicies, and decides in user space, through an
// NFQUEUE, whether the first packet of each connection to or from a pod is allowed.
//
// Upstream's cmd/main.go reads only an in-cluster configuration (a ServiceAccount token under
// /var/run/secrets), which a host process has not, and catches only SIGINT, so a SIGTERM would
// leave its nftables table behind. This main takes a kubeconfig, stops on SIGTERM too, waits
// for the controller to remove its table, and has two modes for scripts/cluster.sh's down and
// check-clean: -cleanup deletes the controller's nftables table, -show-table prints it.
//
// Test tooling only; the product itself is C++.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/google/nftables"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

func main() {
	var (
		kubeconfig  = flag.String("kubeconfig", "", "kubeconfig of the controller's user (required to run)")
		nodeName    = flag.String("hostname-override", "", "the name of the Node whose pods this controller polices (required to run)")
		queueID     = flag.Int("nfqueue-id", 100, "the NFQUEUE number whose packets the controller judges")
		table       = flag.String("nftables-table", "kube-network-policies", "the name of the controller's nftables table (family inet)")
		failOpen    = flag.Bool("fail-open", false, "accept rather than drop packets the controller cannot judge (it is not running, its queue is full, a packet it cannot parse)")
		metricsAddr = flag.String("metrics-bind-address", "", "host:port for the controller's /metrics; empty: none")
		cleanup     = flag.Bool("cleanup", false, "delete the nftables table -nftables-table, if there is one, and exit")
		showTable   = flag.Bool("show-table", false, "print the nftables table -nftables-table if it exists (\"inet NAME\"), and exit")
	)
	klog.InitFlags(flag.CommandLine)
	flag.Usage = func() {
		fmt.Fprint(os.Stderr, "usage: kube-network-policies -kubeconfig FILE -hostname-override NODE [flags]\n"+
			"       kube-network-policies -cleanup | -show-table [-nftables-table NAME]\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	switch {
	case *cleanup:
		os.Exit(report(deleteTable(*table)))
	case *showTable:
		found, err := tableExists(*table)
		if found {
			fmt.Printf("inet %s\n", *table)
		}
		os.Exit(report(err))
	}
	if *kubeconfig == "" || *nodeName == "" {
		fmt.Fprintln(os.Stderr, "kube-network-policies: -kubeconfig and -hostname-override are required")
		os.Exit(2)
	}
	if err := run(*kubeconfig, networkpolicy.Config{
		FailOpen:    *failOpen,
		QueueID:     *queueID,
		NodeName:    *nodeName,
		NFTableName: *table,
		// Upstream's default: DNS replies are accepted before the queue (a conntrack race
		// of kernels before 6.12); it only changes the controller's own nftables rules.
		NetfilterBug1766Fix: true,
	}, *metricsAddr); err != nil {
		klog.ErrorS(err, "kube-network-policies stopped")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func report(err error) int {
	if err != nil {
		fmt.Fprintf(os.Stderr, "kube-network-policies: %v\n", err)
		return 1
	}
	return 0
}

// run: the controller until SIGTERM or SIGINT; then it removes its nftables table before
// this returns (at most 10 s).
func run(kubeconfig string, cfg networkpolicy.Config, metricsAddr string) error {
	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("reading %s: %w", kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGTERM, unix.SIGINT)
	defer stop()

	if metricsAddr != "" {
		if _, _, err := net.SplitHostPort(metricsAddr); err != nil {
			return fmt.Errorf("-metrics-bind-address %q: %w", metricsAddr, err)
		}
		listener, err := net.Listen("tcp", metricsAddr)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.Handler())
		server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = server.Serve(listener) }()
		defer server.Close()
	}

	// Only what NetworkPolicy needs: no AdminNetworkPolicy or BaselineAdminNetworkPolicy
	// (their CRDs are not installed), hence no Node informer and no policy-api client.
	factory := informers.NewSharedInformerFactory(client, 0)
	controller, err := networkpolicy.NewController(client,
		factory.Networking().V1().NetworkPolicies(), factory.Core().V1().Namespaces(), factory.Core().V1().Pods(),
		nil, nil, nil, nil, cfg)
	if err != nil {
		return err
	}
	klog.InfoS("starting", "node", cfg.NodeName, "nfqueue", cfg.QueueID, "table", "inet "+cfg.NFTableName, "failOpen", cfg.FailOpen)
	done := make(chan error, 1)
	go func() { done <- controller.Run(ctx) }()
	factory.Start(ctx.Done())

	select {
	case err := <-done: // before any signal: it could not start (the nfqueue, the API server)
		if err == nil {
			err = errors.New("the controller returned")
		}
		return err
	case <-ctx.Done():
	}
	klog.InfoS("stopping: removing the nftables table", "table", "inet "+cfg.NFTableName)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		klog.InfoS("the controller did not stop within 10 s; deleting its table here")
	}
	return deleteTable(cfg.NFTableName)
}

func tableExists(name string) (bool, error) {
	conn, err := nftables.New()
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, fmt.Errorf("listing nftables tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == name {
			return true, nil
		}
	}
	return false, nil
}

// deleteTable: the controller's table gone (nothing to do when there is none).
func deleteTable(name string) error {
	found, err := tableExists(name)
	if err != nil || !found {
		return err
	}
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	conn.DelTable(&nftables.Table{Name: name, Family: nftables.TableFamilyINet})
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("deleting nftables table inet %s: %w", name, err)
	}
	return nil
}
