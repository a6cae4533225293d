#!/usr/bin/env bash
# Issue #15: lockstep-operator against Kubeflow training-operator v1.8.1 on one API server.
#   bench/operator/run.sh [FLAGS]
# Sets up what it needs (scripts/setup.sh --bench-operator: the test control plane, kubectl,
# and Kubeflow's manager built once from the Go module proxy, cached), builds, then runs
# lockstep-bench-operator --peer kubeflow: J jobs x N pods (100 x 8) applied at once, rounds
# alternating lockstep and Kubeflow, each operator at its defaults. FLAGS go to the bench:
#   --rounds N  --jobs J  --nodes N  --operators lockstep,kubeflow
#   --lockstep-flags "--kube-api-qps 50 ..."  --kubeflow-flags "--controller-threads 4 ..."
# Kubeflow's manager writes its webhook certificate to /tmp/k8s-webhook-server/serving-certs
# (a path fixed in its source), so two runs on one machine must not overlap.
set -euo pipefail
source "$(dirname "$0")/../../scripts/common.sh"
"$ROOT/scripts/setup.sh" --bench-operator
"$ROOT/scripts/build.sh"
export LOCKSTEP_K8S_BIN=$K8S_BIN PATH=$TOOLS_BIN:$PATH
exec "$BUILD_DIR/bench/lockstep-bench-operator" --peer kubeflow --kubeflow-bin "$KUBEFLOW_BIN/training-operator" \
  --kubeflow-crd "$KUBEFLOW_CRD" "$@"
