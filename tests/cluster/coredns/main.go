// A CoreDNS with only the plugins the real-node cluster's Corefile uses
// (scripts/cluster.sh): cluster names from the API server, everything else forwarded to
// the host's resolver. Upstream's main links every plugin; this one builds in a fraction
// of the time.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() { coremain.Run() }
