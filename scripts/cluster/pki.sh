# shellcheck shell=bash
# scripts/cluster.sh's certificates and kubeconfigs (in $PKI, kept across down and up).
# Sourced; not run.

# make_pki: a CA, serving certificates for the API server and kubelet, a client certificate
# per component, the ServiceAccount signing key (P-256 throughout: quick to make, and what
# Go's TLS and JWT signing accept). Kept across down/up; remade when the node address or the
# set of clients changes (a state directory from before a component was added has no
# certificate for it).
make_pki() {
  local ip=$1 nodes=$2 i key="$1 $NODE_NAME $2 $CLIENTS"
  [[ $(cat "$PKI/.for" 2>/dev/null) == "$key" ]] && return 0
  rm -rf "$PKI"; mkdir -p "$PKI"
  (
    # shellcheck disable=SC2164  # set -e (scripts/cluster.sh)
    cd "$PKI"
    ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    openssl req -x509 $ec -keyout ca.key -out ca.crt -days 3650 -subj /CN=lockstep-cluster-ca 2>/dev/null
    openssl ecparam -name prime256v1 -genkey -noout -out sa.key
    openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
    # cert NAME SUBJECT [SANS]: a certificate signed by the CA; with SANS a server one too.
    cert() {
      if [[ -n ${3:-} ]]; then printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$3" > "$1.ext"
      else printf 'extendedKeyUsage=clientAuth\n' > "$1.ext"; fi
      openssl req -new $ec -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    cert apiserver /CN=kube-apiserver "IP:127.0.0.1,IP:$API_SERVICE_IP,IP:$ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    # Each node's kubelet: a serving certificate and a client one as system:node:NAME (the Node
    # authorizer lets a kubelet write only its own node and pods).
    for ((i = 0; i < nodes; i++)); do
      local name; name=$(node_name "$i")
      cert "$(node_client "$i")-serving" "/O=system:nodes/CN=system:node:$name" "IP:127.0.0.1,IP:$ip,DNS:$name,DNS:localhost"
      cert "$(node_client "$i")" "/O=system:nodes/CN=system:node:$name"
    done
    cert admin /O=system:masters/CN=lockstep-admin
    cert apiserver-kubelet-client /O=system:masters/CN=kube-apiserver-kubelet-client
    cert kube-scheduler /CN=system:kube-scheduler
    cert kube-controller-manager /CN=system:kube-controller-manager
    cert kube-proxy /CN=system:kube-proxy
    cert coredns /CN=lockstep:coredns
    cert kube-scheduler-cosched /CN=lockstep:kube-scheduler-cosched
    cert kube-network-policies /CN=lockstep:kube-network-policies
    chmod 600 ./*.key
  )
  echo "$key" > "$PKI/.for"
}

# kubeconfig NAME FILE: a kubeconfig for the client certificate NAME, with the data embedded
# so that the file works on its own (templates/kubeconfig.yaml).
# shellcheck disable=SC2034  # render reads its variables by name
kubeconfig() {
  local user=$1 ca_data cert_data key_data
  ca_data=$(base64 -w0 < "$PKI/ca.crt")
  cert_data=$(base64 -w0 < "$PKI/$user.crt")
  key_data=$(base64 -w0 < "$PKI/$user.key")
  render kubeconfig.yaml "$2" API_PORT user ca_data cert_data key_data
  chmod 600 "$2"
}
