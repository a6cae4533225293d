# lockstep-operator: a small, non-root runtime image. Only the operator is built, so only its
# install component is installed (tests/images/images_test.cpp replays these lines).
#   docker build -f docker/operator.Dockerfile -t lockstep/operator:0.1.0 .
FROM debian:bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build libyaml-cpp-dev nlohmann-json3-dev \
      prometheus-cpp-dev libsimdjson-dev libmicrohttpd-dev libssl-dev pkg-config && rm -rf /var/lib/apt/lists/*
COPY . /src
RUN cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_BUILD_TESTS=OFF \
      -DLOCKSTEP_BUILD_AGENT=OFF -DLOCKSTEP_BUILD_TRAINER=OFF \
 && cmake --build /build --target lockstep-operator \
 && cmake --install /build --component operator --prefix /out

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
      libyaml-cpp0.7 libprometheus-cpp-core1.0 libmicrohttpd12 libsimdjson14 libssl3 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/bin/lockstep-operator /usr/local/bin/lockstep-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/lockstep-operator"]
