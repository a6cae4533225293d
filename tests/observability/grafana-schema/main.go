// grafana-schema-check: parses Grafana dashboards strictly with Grafana's own published
// dashboard types (github.com/grafana/grafana-foundation-sdk/go, generated from the schemas
// Grafana itself validates against), with every core panel and data source plugin registered,
// so each panel's options and fieldConfig and each Prometheus target are checked against their
// plugin's types too. Grafana cannot be installed here (not in Debian, its module not served);
// this is what can be proved without it. Built by scripts/setup.sh as test tooling, run by
// dashboards_test:
//
//	grafana-schema-check DASHBOARD.json...
//
// prints one line a dashboard and exits 1 if any has a problem (every problem listed).
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// problems lists what a strict parse found. UnmarshalJSONStrict returns its error list as an
// error even when the list is empty (a non-nil error whose text is ""): that is success.
func problems(err error) []string {
	if err == nil {
		return nil
	}
	var list cog.BuildErrors
	if errors.As(err, &list) {
		out := make([]string, 0, len(list))
		for _, e := range list {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: grafana-schema-check DASHBOARD.json...")
		os.Exit(64)
	}
	plugins.RegisterDefaultPlugins()
	failed := false
	for _, path := range os.Args[1:] {
		raw, err := os.ReadFile(path)
		if err != nil {
			fmt.Printf("%s: %v\n", path, err)
			failed = true
			continue
		}
		var d dashboard.Dashboard
		found := problems(d.UnmarshalJSONStrict(raw))
		if len(found) > 0 {
			failed = true
			fmt.Printf("%s: %d problem(s) against Grafana's dashboard schema:\n", path, len(found))
			for _, p := range found {
				fmt.Printf("  %s\n", p)
			}
			continue
		}
		fmt.Printf("%s: parsed strictly: %d panels, %d variables\n", path, len(d.Panels), len(d.Templating.List))
	}
	if failed {
		os.Exit(1)
	}
}
