// What the image tests read from docker/*.Dockerfile: the build and install command lines
// (images_test replays them against the build tree) and the final stage's runtime settings
// (built_images_test compares the images scripts/images.sh builds with them).
#pragma once

#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace lockstep::test {

struct DockerInstall {
  std::string component;     // empty: every component
  std::string prefix;
  bool final_stage = false;  // installed straight into the image, not into a build stage
};

struct DockerCopy {
  std::string src;  // COPY --from=build SRC DST
  std::string dst;
};

struct Dockerfile {
  std::set<std::string> targets;        // cmake --build ... --target A B
  std::vector<DockerInstall> installs;  // cmake --install ... [--component C] --prefix P
  std::vector<DockerCopy> copies;
  // The final stage's settings, as written (empty when the stage does not set them).
  std::string user;                     // USER
  std::string entrypoint;               // ENTRYPOINT, a JSON array
  std::string cmd;                      // CMD, a JSON array
  std::string workdir;                  // WORKDIR
  std::vector<std::string> env;         // ENV KEY=VALUE
  std::set<std::string> apt_packages;   // apt-get install ... in the final stage
};

inline std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Continuation lines joined; each RUN split at `&&` and `;`. A stage starts at each FROM; the
// settings kept are the last stage's.
inline Dockerfile parse_dockerfile(const std::string& text) {
  std::string joined = std::regex_replace(text, std::regex(R"(\\\n)"), " ");
  Dockerfile d;
  std::vector<int> install_stage;
  int stage = -1;
  std::istringstream lines(joined);
  for (std::string line; std::getline(lines, line);) {
    auto w = words(line);
    if (w.empty() || w[0].rfind("#", 0) == 0) continue;
    const std::string rest = line.substr(line.find(w[0]) + w[0].size());
    const std::string value = std::regex_replace(rest, std::regex(R"(^\s+|\s+$)"), "");
    if (w[0] == "FROM") {
      ++stage;
      d.user = d.entrypoint = d.cmd = d.workdir = "";
      d.env.clear();
      d.apt_packages.clear();
    }
    if (w[0] == "USER") d.user = value;
    if (w[0] == "ENTRYPOINT") d.entrypoint = value;
    if (w[0] == "CMD") d.cmd = value;
    if (w[0] == "WORKDIR") d.workdir = value;
    if (w[0] == "ENV")
      for (size_t i = 1; i < w.size(); ++i) d.env.push_back(w[i]);
    if (w.size() >= 4 && w[0] == "COPY" && w[1] == "--from=build") d.copies.push_back({w[2], w[3]});
    if (w[0] != "RUN") continue;
    static const std::regex separator("&&|;");
    for (const auto& cmd : std::vector<std::string>(std::sregex_token_iterator(rest.begin(), rest.end(), separator, -1),
                                                    std::sregex_token_iterator())) {
      auto a = words(cmd);
      if (a.size() >= 2 && a[0] == "apt-get" && a[1] == "install") {
        for (size_t i = 2; i < a.size(); ++i)
          if (a[i].rfind("-", 0) != 0) d.apt_packages.insert(a[i]);
      }
      if (a.size() < 2 || a[0] != "cmake") continue;
      if (a[1] == "--build") {
        for (size_t i = 2; i < a.size(); ++i)
          if (a[i] == "--target")
            for (size_t j = i + 1; j < a.size() && a[j].rfind("-", 0) != 0; ++j) d.targets.insert(a[j]);
      } else if (a[1] == "--install") {
        DockerInstall in;
        for (size_t i = 2; i + 1 < a.size(); ++i) {
          if (a[i] == "--component") in.component = a[i + 1];
          if (a[i] == "--prefix") in.prefix = a[i + 1];
        }
        d.installs.push_back(in);
        install_stage.push_back(stage);
      }
    }
  }
  for (size_t i = 0; i < d.installs.size(); ++i) d.installs[i].final_stage = install_stage[i] == stage;
  return d;
}

}  // namespace lockstep::test
