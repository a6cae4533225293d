#!/bin/sh
# After `for f in .deps/*.deb; do dpkg -x "$f" "$P"; done`, run: sh bench/trainer/deps_fixup.sh "$P"
# Makes the unpacked Debian 12 dev packages usable from a prefix other than / on Ubuntu 24.04.
set -eu
P=$1; L=$P/usr/lib/x86_64-linux-gnu
# prometheus-cpp-config.cmake find_dependency(CURL)s for prometheus-cpp::push, which nothing here links.
sed -i 's/^set(PROMETHEUS_CPP_ENABLE_PUSH ON)$/set(PROMETHEUS_CPP_ENABLE_PUSH OFF)/' "$L/cmake/prometheus-cpp/prometheus-cpp-config.cmake"
# zlib1g-dev's libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13 (absolute; Ubuntu 24.04 has libz.so.1.3).
ln -sfn /lib/x86_64-linux-gnu/libz.so.1 "$L/libz.so"
# libssl-dev's libcrypto.so/libssl.so -> libcrypto.so.3/libssl.so.3 (relative, not in the prefix):
# point them at the system's OpenSSL 3 runtime.
ln -sfn /usr/lib/x86_64-linux-gnu/libcrypto.so.3 "$L/libcrypto.so"
ln -sfn /usr/lib/x86_64-linux-gnu/libssl.so.3 "$L/libssl.so"
# <openssl/configuration.h> lives in the multiarch include dir, which gcc searches only under /usr.
cp "$P"/usr/include/x86_64-linux-gnu/openssl/*.h "$P/usr/include/openssl/"
