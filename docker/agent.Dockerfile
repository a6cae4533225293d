# lockstep/agent: the agent bundle alone, for the init container the operator adds to every
# training pod (docs/operator.md, "Agent injection"): its command
# `/lockstep/lockstep-agent --install-bundle /lockstep-install` copies the bundle into the pod's
# emptyDir. The bundle carries its own loader and libraries and its launcher is static, so the
# image needs no base, no shell and no libc (tests/images/images_test.cpp replays these lines).
#   docker build -f docker/agent.Dockerfile -t lockstep/agent:0.1.0 .
FROM debian:bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build prometheus-cpp-dev nlohmann-json3-dev libssl-dev && rm -rf /var/lib/apt/lists/*
COPY . /src
RUN cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_BUILD_TESTS=OFF \
      -DLOCKSTEP_BUILD_OPERATOR=OFF -DLOCKSTEP_BUILD_TRAINER=OFF \
 && cmake --build /build --target lockstep-agent-bundle \
 && cmake --install /build --component agent-bundle --prefix /out

FROM scratch
COPY --from=build /out/lockstep /lockstep
USER 65532:65532
