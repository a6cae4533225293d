// bench/operator: a pod created in Kubernetes' protobuf against JSON, on the API server's CPU
// (#44 item 3). Kubernetes' own controllers create pods in application/vnd.kubernetes.protobuf;
// the operator creates them in JSON. Against the local control plane (etcd and kube-apiserver
// of the pinned release), the operator's pod of an 8-node job (agent injected) created
//   (a) with a JSON body, Accept JSON (what the operator did);
//   (b) with a protobuf body, Accept protobuf (what Kubernetes' controllers do);
//   (c) with a protobuf body, Accept JSON (the request's decode apart from the answer's encode);
//   (d) with a JSON body, the answer's metadata alone asked for (what the operator does now,
//       Note [Metadata answers] in kube/client.hpp: the server encodes no spec and no status);
// each variant in a namespace of its own, rounds alternating (the first variant of a round
// turns with the round), and for each round the API server's and etcd's CPU per pod, pods a
// second, errors, and the bench's own CPU per pod (all of it, and its encoding and decoding).
//
// The protobuf body is made at run time, without protoc: k8s.io/api's .proto files of the
// pinned release (from the Go module cache) parsed by libprotobuf's Importer, and the pod's JSON
// copied into a DynamicMessage of k8s.io.api.core.v1.Pod by reflection (to_proto). On the wire
// it is the 4 bytes "k8s\0" and a runtime.Unknown holding the serialized Pod, as
// k8s.io/apimachinery/pkg/runtime/serializer/protobuf writes it. Go's generated marshaller writes
// every non-pointer field, empty or zero ones included; to_proto writes only what the JSON has,
// so a Go client's body is somewhat larger than this one (the server's own answers in both
// encodings, printed beside it, are Go's). The bench's own CPU is a generic codec's: a
// DynamicMessage filled and read by reflection (slower than generated code), and JSON by
// nlohmann::json (the operator reads answers with simdjson, pruned: kube/json_text.hpp).
//
// Before measuring, a check that fails the run (exit 1): each of the job's 8 pods, created in
// each variant and read back as JSON, equals the same pod created in JSON, bar the server's own
// fields (name, uid, resourceVersion, creationTimestamp, managedFields' times); then the bodies'
// sizes. Every round is printed; nothing timed is asserted (a benchmark, not a timed test).
// Exit 77 when the .proto files are missing (1 under LOCKSTEP_REQUIRE_ALL=1), 130 on Ctrl-C.
// Usage: lockstep-bench-pod-proto [--rounds R] [--pods N] [--clients C] [--proto-root DIR]
//   --proto-root: a directory where k8s.io/api/core/v1/generated.proto and
//   k8s.io/apimachinery/pkg/... resolve (the import root); default: k8s.io/api and
//   k8s.io/apimachinery at LOCKSTEP_K8S_API_VERSION in the Go module cache ($GOMODCACHE, else
//   the set-up's cache: LOCKSTEP_CACHE/go/mod).
#include <sys/resource.h>
#include <time.h>

#include <google/protobuf/compiler/importer.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/message.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "bench_util.hpp"
#include "control_plane.hpp"
#include "kube/client.hpp"
#include "kube/http.hpp"
#include "kube/resource.hpp"
#include "kube/rest_config.hpp"
#include "pod_bench.hpp"

namespace bench = lockstep::bench;
namespace http = lockstep::kube::http;
namespace pb = google::protobuf;
using json = nlohmann::json;
namespace res = lockstep::kube::resources;
using namespace lockstep::bench::pods;  // the pod, its read-back, the control plane (pod_bench.hpp)

namespace {

constexpr std::string_view kProtobuf = "application/vnd.kubernetes.protobuf";
constexpr std::string_view kJson = "application/json";
// k8s.io/apimachinery/pkg/runtime/serializer/protobuf's protoEncodingPrefix: "k8s" and the
// encoding style 0 (a runtime.Unknown follows).
const std::string kMagic("k8s\0", 4);

// --- the .proto files, parsed at run time -------------------------------------------------
const char* const kProtoFiles[] = {
    "k8s.io/api/core/v1/generated.proto",
    "k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto",
    "k8s.io/apimachinery/pkg/runtime/generated.proto",
    "k8s.io/apimachinery/pkg/runtime/schema/generated.proto",
    "k8s.io/apimachinery/pkg/util/intstr/generated.proto",
    "k8s.io/apimachinery/pkg/api/resource/generated.proto",
};

struct Errors : pb::compiler::MultiFileErrorCollector {
  std::string text;
  void AddError(const std::string& file, int line, int column, const std::string& message) override {
    text += file + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " + message + "\n";
  }
};

// Pod and runtime.Unknown (and meta.v1.Status, for an error's message) as dynamic messages.
// Built once; their prototypes' New() is then safe from every client thread.
struct Schema {
  pb::compiler::DiskSourceTree tree;
  Errors errors;
  std::unique_ptr<pb::compiler::Importer> importer;
  std::unique_ptr<pb::DynamicMessageFactory> factory;
  const pb::Message* pod = nullptr;
  const pb::Message* unknown = nullptr;
  const pb::Message* status = nullptr;
};

// nullptr with `missing` set when a file is not there (the bench is skipped); throws when the
// files do not parse.
std::unique_ptr<Schema> load_schema(const std::string& proto_root, std::string& missing) {
  auto s = std::make_unique<Schema>();
  const char* gomod = std::getenv("GOMODCACHE");
  const std::string cache = gomod && *gomod ? gomod : bench::cache_dir() + "/go/mod";
  if (!proto_root.empty()) {
    s->tree.MapPath("", proto_root);
  } else {
    s->tree.MapPath("k8s.io/api", cache + "/k8s.io/api@" LOCKSTEP_K8S_API_VERSION);
    s->tree.MapPath("k8s.io/apimachinery", cache + "/k8s.io/apimachinery@" LOCKSTEP_K8S_API_VERSION);
  }
  for (const char* f : kProtoFiles) {
    std::string disk;
    if (!s->tree.VirtualFileToDiskFile(f, &disk)) {
      missing = std::string(f) + (proto_root.empty() ? " of " LOCKSTEP_K8S_API_VERSION " not in the Go module cache " + cache +
                                                           " (scripts/setup.sh --bench-operator fetches it)"
                                                     : " not under --proto-root " + proto_root);
      return nullptr;
    }
  }
  s->importer = std::make_unique<pb::compiler::Importer>(&s->tree, &s->errors);
  if (!s->importer->Import(kProtoFiles[0])) throw std::runtime_error("the .proto files do not parse:\n" + s->errors.text);
  s->factory = std::make_unique<pb::DynamicMessageFactory>(s->importer->pool());
  auto prototype = [&](const char* name) {
    const pb::Descriptor* d = s->importer->pool()->FindMessageTypeByName(name);
    if (!d) throw std::runtime_error(std::string("no message ") + name + " in the .proto files");
    return s->factory->GetPrototype(d);
  };
  s->pod = prototype("k8s.io.api.core.v1.Pod");
  s->unknown = prototype("k8s.io.apimachinery.pkg.runtime.Unknown");
  s->status = prototype("k8s.io.apimachinery.pkg.apis.meta.v1.Status");
  return s;
}

// --- JSON to protobuf -----------------------------------------------------------------------
// The pod's JSON into a Pod message by reflection. The .proto files name each field as its
// JSON key (lowerCamelCase); where Kubernetes' JSON form is not the message's, the message is
// filled as its Go type's JSON decoding would: resource.Quantity ("500m": its field `string`),
// intstr.IntOrString (a number or a string: type 0 and intVal, or type 1 and strVal), meta.v1
// Time and MicroTime (RFC 3339: seconds and nanos), runtime.RawExtension (any JSON: `raw`).
// A key with no field, or a value of the wrong kind, throws, naming its path: nothing is
// dropped silently. A null is left out (Go's decoding leaves the field unset too).
[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error((path.empty() ? std::string("the pod") : path) + ": " + what);
}

const std::string& string_of(const json& v, const std::string& path) {
  if (!v.is_string()) fail(path, "a string was expected, not " + v.dump());
  return v.get_ref<const std::string&>();
}

template <typename T>
T integer_of(const json& v, const std::string& path) {
  if (!v.is_number_integer()) fail(path, "an integer was expected, not " + v.dump());
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) fail(path, "out of range: " + v.dump());
    return static_cast<T>(u);
  }
  const auto i = v.get<int64_t>();
  if constexpr (std::is_unsigned_v<T>) {
    if (i < 0) fail(path, "out of range: " + v.dump());
  } else {
    if (i < std::numeric_limits<T>::min() || i > std::numeric_limits<T>::max()) fail(path, "out of range: " + v.dump());
  }
  return static_cast<T>(i);
}

// RFC 3339 as metav1.Time ("2006-01-02T15:04:05Z") and MicroTime (".000000" more) write it.
std::pair<int64_t, int32_t> rfc3339(const std::string& s, const std::string& path) {
  std::tm tm{};
  const char* p = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!p) fail(path, "not an RFC 3339 time: " + s);
  int32_t nanos = 0;
  if (*p == '.') {
    int digits = 0;
    for (++p; std::isdigit(static_cast<unsigned char>(*p)); ++p, ++digits)
      if (digits < 9) nanos = nanos * 10 + (*p - '0');
    for (; digits < 9; ++digits) nanos *= 10;
  }
  int64_t offset = 0;
  if (*p == 'Z') {
    ++p;
  } else if ((*p == '+' || *p == '-') && std::strlen(p) == 6 && p[3] == ':') {
    offset = (*p == '-' ? -1 : 1) * (std::stoi(std::string(p + 1, 2)) * 3600 + std::stoi(std::string(p + 4, 2)) * 60);
    p += 6;
  }
  if (*p) fail(path, "not an RFC 3339 time: " + s);
  return {static_cast<int64_t>(timegm(&tm)) - offset, nanos};
}

const pb::FieldDescriptor* field(const pb::Descriptor* d, const std::string& name) {
  if (const auto* f = d->FindFieldByName(name)) return f;
  for (int i = 0; i < d->field_count(); ++i)
    if (d->field(i)->json_name() == name) return d->field(i);
  return nullptr;
}

const pb::FieldDescriptor* must_field(const pb::Descriptor* d, const std::string& name) {
  const auto* f = field(d, name);
  if (!f) throw std::logic_error(d->full_name() + " has no field " + name);
  return f;
}

// Go structs embedded with `json:",inline"` (k8s.io/api core/v1's types.go, those with a protobuf
// tag): their fields are the outer object's keys in JSON, and one field of the outer message in
// protobuf. The outer message's full name, and that field.
const std::pair<const char*, const char*> kInline[] = {
    {"k8s.io.api.core.v1.Volume", "volumeSource"},
    {"k8s.io.api.core.v1.PersistentVolumeSpec", "persistentVolumeSource"},
    {"k8s.io.api.core.v1.Probe", "handler"},
    {"k8s.io.api.core.v1.EphemeralContainer", "ephemeralContainerCommon"},
    {"k8s.io.api.core.v1.SecretProjection", "localObjectReference"},
    {"k8s.io.api.core.v1.ConfigMapVolumeSource", "localObjectReference"},
    {"k8s.io.api.core.v1.ConfigMapProjection", "localObjectReference"},
    {"k8s.io.api.core.v1.ConfigMapKeySelector", "localObjectReference"},
    {"k8s.io.api.core.v1.SecretKeySelector", "localObjectReference"},
    {"k8s.io.api.core.v1.ConfigMapEnvSource", "localObjectReference"},
    {"k8s.io.api.core.v1.SecretEnvSource", "localObjectReference"},
};

const pb::FieldDescriptor* inline_field(const pb::Descriptor* d) {
  for (const auto& [type, name] : kInline)
    if (d->full_name() == type) return must_field(d, name);
  return nullptr;
}

void fill(pb::Message& m, const json& v, const std::string& path);

// One value of field `f` of `m` (a repeated field's next element, a singular field's value).
void put(pb::Message& m, const pb::FieldDescriptor* f, const json& v, const std::string& path) {
  const pb::Reflection* r = m.GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      fill(rep ? *r->AddMessage(&m, f) : *r->MutableMessage(&m, f), v, path);
      return;
    case pb::FieldDescriptor::CPPTYPE_STRING: {
      std::string s;
      if (f->type() == pb::FieldDescriptor::TYPE_BYTES) {  // base64 in JSON, as Go's []byte
        auto decoded = lockstep::kube::decode_base64(string_of(v, path));
        if (!decoded) fail(path, "not base64: " + v.dump());
        s = std::move(*decoded);
      } else {
        s = string_of(v, path);
      }
      rep ? r->AddString(&m, f, std::move(s)) : r->SetString(&m, f, std::move(s));
      return;
    }
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      if (!v.is_boolean()) fail(path, "a boolean was expected, not " + v.dump());
      rep ? r->AddBool(&m, f, v.get<bool>()) : r->SetBool(&m, f, v.get<bool>());
      return;
    case pb::FieldDescriptor::CPPTYPE_INT32: {
      const auto x = integer_of<int32_t>(v, path);
      rep ? r->AddInt32(&m, f, x) : r->SetInt32(&m, f, x);
      return;
    }
    case pb::FieldDescriptor::CPPTYPE_INT64: {
      const auto x = integer_of<int64_t>(v, path);
      rep ? r->AddInt64(&m, f, x) : r->SetInt64(&m, f, x);
      return;
    }
    case pb::FieldDescriptor::CPPTYPE_UINT32: {
      const auto x = integer_of<uint32_t>(v, path);
      rep ? r->AddUInt32(&m, f, x) : r->SetUInt32(&m, f, x);
      return;
    }
    case pb::FieldDescriptor::CPPTYPE_UINT64: {
      const auto x = integer_of<uint64_t>(v, path);
      rep ? r->AddUInt64(&m, f, x) : r->SetUInt64(&m, f, x);
      return;
    }
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
    case pb::FieldDescriptor::CPPTYPE_FLOAT: {
      if (!v.is_number()) fail(path, "a number was expected, not " + v.dump());
      const double x = v.get<double>();
      const auto y = static_cast<float>(x);
      if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_FLOAT) rep ? r->AddFloat(&m, f, y) : r->SetFloat(&m, f, y);
      else rep ? r->AddDouble(&m, f, x) : r->SetDouble(&m, f, x);
      return;
    }
    case pb::FieldDescriptor::CPPTYPE_ENUM:
      fail(path, "an enum field (" + f->full_name() + "), which Kubernetes' types do not have");
  }
}

void set_string(pb::Message& m, const char* name, const std::string& value) {
  m.GetReflection()->SetString(&m, must_field(m.GetDescriptor(), name), value);
}

void fill(pb::Message& m, const json& v, const std::string& path) {
  const pb::Descriptor* d = m.GetDescriptor();
  const pb::Reflection* r = m.GetReflection();
  const std::string& type = d->full_name();
  if (type == "k8s.io.apimachinery.pkg.api.resource.Quantity") {
    if (v.is_number()) set_string(m, "string", v.dump());  // Go's Quantity takes a JSON number too
    else set_string(m, "string", string_of(v, path));
    return;
  }
  if (type == "k8s.io.apimachinery.pkg.util.intstr.IntOrString") {
    if (v.is_number_integer()) {
      r->SetInt64(&m, must_field(d, "type"), 0);
      r->SetInt32(&m, must_field(d, "intVal"), integer_of<int32_t>(v, path));
    } else {
      r->SetInt64(&m, must_field(d, "type"), 1);
      set_string(m, "strVal", string_of(v, path));
    }
    return;
  }
  if (type == "k8s.io.apimachinery.pkg.apis.meta.v1.Time" || type == "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime") {
    const auto [seconds, nanos] = rfc3339(string_of(v, path), path);
    r->SetInt64(&m, must_field(d, "seconds"), seconds);
    r->SetInt32(&m, must_field(d, "nanos"), nanos);
    return;
  }
  if (type == "k8s.io.apimachinery.pkg.runtime.RawExtension") {
    r->SetString(&m, must_field(d, "raw"), v.dump());
    return;
  }
  if (!v.is_object()) fail(path, "an object (" + type + ") was expected, not " + v.dump());
  json inlined = json::object();  // the keys of an embedded struct's fields
  for (const auto& [key, value] : v.items()) {
    const std::string at = path.empty() ? key : path + "." + key;
    if (value.is_null()) continue;
    const pb::FieldDescriptor* f = field(d, key);
    if (!f && inline_field(d)) {
      inlined[key] = value;
      continue;
    }
    if (!f) fail(at, "no field of that name in " + type);
    if (f->is_map()) {  // labels, annotations, resources' requests and limits, nodeSelector
      if (!value.is_object()) fail(at, "an object (a map) was expected, not " + value.dump());
      const pb::Descriptor* entry = f->message_type();
      for (const auto& [k, x] : value.items()) {
        pb::Message* e = r->AddMessage(&m, f);
        e->GetReflection()->SetString(e, entry->map_key(), k);
        if (!x.is_null()) put(*e, entry->map_value(), x, at + "[" + k + "]");
      }
    } else if (f->is_repeated()) {
      if (!value.is_array()) fail(at, "an array was expected, not " + value.dump());
      for (size_t i = 0; i < value.size(); ++i) {
        if (value[i].is_null()) fail(at + "[" + std::to_string(i) + "]", "null in a list");
        put(m, f, value[i], at + "[" + std::to_string(i) + "]");
      }
    } else {
      put(m, f, value, at);
    }
  }
  if (!inlined.empty()) fill(*r->MutableMessage(&m, inline_field(d)), inlined, path);
}

// The Pod message has no apiVersion and kind: in protobuf they are the envelope's (envelope()),
// which says v1 Pod, so the JSON's must say the same.
std::unique_ptr<pb::Message> to_proto(const Schema& s, const json& pod) {
  if (!pod.is_object()) fail("", "an object was expected, not " + pod.dump());
  json rest = pod;
  for (const auto& [key, want] : {std::pair<const char*, const char*>{"apiVersion", "v1"}, {"kind", "Pod"}}) {
    if (rest.contains(key) && rest[key] != want) fail(key, std::string("not ") + want + " but " + rest[key].dump());
    rest.erase(key);
  }
  std::unique_ptr<pb::Message> m(s.pod->New());
  fill(*m, rest, "");
  return m;
}

// The request body: "k8s\0" and a runtime.Unknown {typeMeta {apiVersion v1, kind Pod}, raw: the
// Pod, contentEncoding "", contentType ""} (Go's Unknown writes the last two even when empty).
std::string envelope(const Schema& s, const pb::Message& pod) {
  std::unique_ptr<pb::Message> u(s.unknown->New());
  const pb::Descriptor* d = u->GetDescriptor();
  const pb::Reflection* r = u->GetReflection();
  pb::Message* type_meta = r->MutableMessage(u.get(), must_field(d, "typeMeta"));
  set_string(*type_meta, "apiVersion", "v1");
  set_string(*type_meta, "kind", "Pod");
  r->SetString(u.get(), must_field(d, "raw"), pod.SerializeAsString());
  set_string(*u, "contentEncoding", "");
  set_string(*u, "contentType", "");
  return kMagic + u->SerializeAsString();
}

std::string string_field(const pb::Message& m, const char* name) {
  return m.GetReflection()->GetString(m, must_field(m.GetDescriptor(), name));
}

// An answer in protobuf: its Unknown's kind, and its object parsed into `out` (a Pod or a
// Status); false when it is not that envelope or does not parse.
bool from_envelope(const Schema& s, std::string_view body, pb::Message& out, std::string* kind = nullptr) {
  if (body.size() < kMagic.size() || body.substr(0, kMagic.size()) != kMagic) return false;
  std::unique_ptr<pb::Message> u(s.unknown->New());
  if (!u->ParseFromArray(body.data() + kMagic.size(), static_cast<int>(body.size() - kMagic.size()))) return false;
  const auto* tm = must_field(u->GetDescriptor(), "typeMeta");
  if (kind) *kind = string_field(u->GetReflection()->GetMessage(*u, tm), "kind");
  return out.ParseFromString(string_field(*u, "raw"));
}

// --- one create ------------------------------------------------------------------------------
struct Variant {
  const char* name;
  bool proto_body, proto_accept, metadata_answer;
};
constexpr Variant kVariants[] = {{"(a) JSON body, Accept JSON", false, false, false},
                                 {"(b) protobuf body, Accept protobuf", true, true, false},
                                 {"(c) protobuf body, Accept JSON", true, false, false},
                                 {"(d) JSON body, the metadata answered", false, false, true}};

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double process_cpu_seconds() {  // this process's user and system CPU, every thread
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

struct Api {
  http::Transport& transport;
  std::string authorization;
  const Schema& schema;
};

struct Created {
  bool ok = false;         // 201 and an answer that decodes to a Pod
  std::string error;       // otherwise why
  size_t body_bytes = 0, answer_bytes = 0;
  double codec_seconds = 0;  // this thread's CPU encoding the body and decoding the answer
  std::unique_ptr<pb::Message> answer;  // (b): the Pod the server answered
  json answer_json;                      // (a), (c): the same
};

// POSTs `pod` to its namespace as `v` says, the client's work as a client would do it: the body
// encoded (JSON text, or the JSON copied into a Pod message and wrapped), the answer decoded
// (parsed JSON, or the Unknown and its Pod).
Created create(const Api& api, const json& pod, const Variant& v) {
  Created c;
  const double e0 = thread_cpu_seconds();
  std::string body;
  try {
    body = v.proto_body ? envelope(api.schema, *to_proto(api.schema, pod)) : pod.dump();
  } catch (const std::exception& e) {
    c.error = e.what();
    return c;
  }
  c.codec_seconds = thread_cpu_seconds() - e0;
  c.body_bytes = body.size();
  const std::string target = res::kPods.path(pod.at("metadata").value("namespace", ""));
  http::Request req;
  req.method = "POST";
  req.target = target;
  req.content_type = v.proto_body ? kProtobuf : kJson;
  req.body = body;
  req.authorization = api.authorization;
  req.accept = v.proto_accept ? kProtobuf : v.metadata_answer ? std::string_view(lockstep::kube::kMetadataAnswer) : kJson;
  const http::Reply reply = api.transport.round_trip(req);
  c.answer_bytes = reply.body.size();
  const double d0 = thread_cpu_seconds();
  bool decoded = false;
  std::string kind;
  if (v.proto_accept) {
    c.answer.reset(api.schema.pod->New());
    decoded = from_envelope(api.schema, reply.body, *c.answer, &kind) && kind == "Pod";
  } else {
    c.answer_json = json::parse(reply.body, nullptr, false);
    decoded = c.answer_json.is_object() &&
              c.answer_json.value("kind", "") == (v.metadata_answer ? "PartialObjectMetadata" : "Pod");
  }
  c.codec_seconds += thread_cpu_seconds() - d0;
  c.ok = reply.status == 201 && decoded;
  if (c.ok) return c;
  if (reply.status == 0) {
    c.error = reply.error;
  } else {
    // An error's Status, in the encoding asked for.
    std::string message = reply.body;
    if (v.proto_accept) {
      std::unique_ptr<pb::Message> st(api.schema.status->New());
      if (from_envelope(api.schema, reply.body, *st)) message = string_field(*st, "message");
    } else if (c.answer_json.is_object()) {
      message = c.answer_json.value("message", reply.body);
    }
    c.error = "HTTP " + std::to_string(reply.status) + ": " + message;
  }
  return c;
}

// --- the check ---------------------------------------------------------------------------------
// A pod as read back, less what the server sets per object.
json comparable(json pod) {
  json& md = pod["metadata"];
  for (const char* k : {"name", "uid", "resourceVersion", "creationTimestamp"}) md.erase(k);
  if (md.contains("managedFields"))
    for (auto& entry : md["managedFields"]) entry.erase("time");
  return pod;
}

// Each of the job's 8 pods, created in every variant, reads back as it does created in JSON.
// Prints the bodies' sizes for pod 3. False (with the reason printed) fails the run.
bool check(lockstep::test::ControlPlane& cp, lockstep::kube::Client& client, const Api& api,
           const lockstep::reconcile::JobView& view) {
  const std::string ns = "check";
  create_namespace(cp, ns);
  std::vector<Created> sized;  // pod 3's, one per variant
  for (int index = 0; index < 8; ++index) {
    const json pod = pod_of(view, index, true, ns);
    json want;
    for (size_t k = 0; k < std::size(kVariants); ++k) {
      const Variant& v = kVariants[k];
      const std::string name = "check-" + std::to_string(index) + "-" + std::to_string(k);
      const std::string what = std::string(v.name) + ", pod " + std::to_string(index) + ": ";
      json p = pod;
      p["metadata"]["name"] = name;
      Created c = create(api, p, v);
      if (!c.ok) {
        std::cout << "FAILED: " << what << "not created: " << c.error << "\n";
        return false;
      }
      if (v.proto_accept) {  // the answer decodes to the pod created
        const auto& meta = c.answer->GetReflection()->GetMessage(*c.answer, must_field(c.answer->GetDescriptor(), "metadata"));
        if (string_field(meta, "name") != name) {
          std::cout << "FAILED: " << what << "the answer decodes to pod '" << string_field(meta, "name") << "', not '"
                    << name << "'\n";
          return false;
        }
      }
      auto stored = read_back(client, ns, name);
      if (!stored) {
        std::cout << "FAILED: " << what << "the pod created does not read back\n";
        return false;
      }
      json got = comparable(stored->object);
      if (k == 0) {
        want = got;
      } else if (got != want) {
        std::cout << "FAILED: " << what << "the pod read back differs from the pod created in JSON "
                  << "(a JSON patch from that one to this one):\n"
                  << json::diff(want, got).dump(2) << "\n";
        return false;
      }
      if (index == 3) sized.push_back(std::move(c));
    }
  }
  const auto pod_alone = to_proto(api.schema, pod_of(view, 3, true, ns))->ByteSizeLong();
  std::cout << "   check passed: each of the 8 pods, created in each variant, reads back as created in JSON\n"
            << "   one pod (index 3 of 8, agent injected): request body " << sized[0].body_bytes << " bytes in JSON, "
            << sized[1].body_bytes << " in protobuf (the Pod alone " << pod_alone
            << ", the rest the k8s\\0 and Unknown envelope); the server's answer " << sized[0].answer_bytes
            << " bytes in JSON, " << sized[1].answer_bytes << " in protobuf (x" << std::setprecision(2)
            << static_cast<double>(sized[1].answer_bytes) / static_cast<double>(sized[0].answer_bytes)
            << ", both Go's encoding of the created pod), " << sized[3].answer_bytes
            << " in JSON with the metadata alone asked for (Note [Metadata answers] in kube/client.hpp)\n";
  return true;
}

// --- the rounds --------------------------------------------------------------------------------
struct Round {
  double api_ms = 0, etcd_ms = 0, pods_per_s = 0, client_ms = 0, codec_ms = 0;
  int errors = 0;
  std::string first_error;
};

Round measure(lockstep::test::ControlPlane& cp, const Api& api, const lockstep::reconcile::JobView& view,
              const Variant& v, const std::string& ns, int pods, int clients) {
  create_namespace(cp, ns);
  std::vector<json> bodies;  // made before the clock starts: what is timed is the create alone
  for (int i = 0; i < pods; ++i) {
    bodies.push_back(pod_of(view, i % 8, true, ns));
    bodies.back()["metadata"]["name"] = "p-" + std::to_string(i);
  }
  std::atomic<int> errors{0}, done{0};
  std::atomic<long long> codec_ns{0};
  std::mutex mu;
  std::string first_error;
  const double api0 = bench::cpu_seconds(cp.apiserver_pid()), etcd0 = bench::cpu_seconds(cp.etcd_pid());
  const double self0 = process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  bench::parallel(pods, clients, [&](int i) {
    const Created c = create(api, bodies[static_cast<size_t>(i)], v);
    codec_ns += static_cast<long long>(c.codec_seconds * 1e9);
    ++done;
    if (!c.ok) {
      ++errors;
      std::lock_guard<std::mutex> lock(mu);
      if (first_error.empty()) first_error = c.error;
    }
  });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double n = std::max(1, done.load());
  Round r;
  r.api_ms = (bench::cpu_seconds(cp.apiserver_pid()) - api0) / n * 1e3;
  r.etcd_ms = (bench::cpu_seconds(cp.etcd_pid()) - etcd0) / n * 1e3;
  r.client_ms = (process_cpu_seconds() - self0) / n * 1e3;
  r.codec_ms = static_cast<double>(codec_ns.load()) / n * 1e-6;
  r.pods_per_s = n / took;
  r.errors = errors;
  r.first_error = first_error;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bench::catch_stop_signals();
  int pods = 400, rounds = 5, clients = 4;
  std::string proto_root;
  const char* usage = "usage: lockstep-bench-pod-proto [--rounds R] [--pods N] [--clients C] [--proto-root DIR]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::cerr << usage;
      return 2;
    }
    if (a == "--pods") pods = std::stoi(argv[++i]);
    else if (a == "--rounds") rounds = std::stoi(argv[++i]);
    else if (a == "--clients") clients = std::stoi(argv[++i]);
    else if (a == "--proto-root") proto_root = argv[++i];
    else {
      std::cerr << usage;
      return 2;
    }
  }
  if (pods < 1 || rounds < 1 || clients < 1) {
    std::cerr << usage;
    return 2;
  }
  std::cout << "lockstep-bench-pod-proto: the operator's pod of an 8-node job (agent injected) created in "
               "Kubernetes' protobuf against JSON\n";
  try {
    std::string missing;
    std::cerr << "[bench] parsing k8s.io/api's .proto files ...\n";
    const auto schema = load_schema(proto_root, missing);
    if (!schema) {
      const char* req = std::getenv("LOCKSTEP_REQUIRE_ALL");
      const bool require = req && std::string(req) == "1";
      std::cout << (require ? "FAILED: " : "SKIPPED: ") << missing << std::endl;
      return require ? 1 : 77;
    }
    auto cp = start_control_plane();
    lockstep::kube::Client client(unlimited_client(*cp));
    http::TlsConfig tls;
    {
      std::ifstream in(cp->ca_file());
      std::stringstream ss;
      ss << in.rdbuf();
      tls.ca_pem = ss.str();
    }
    // One transport for every variant (kube/http.hpp, the operator's own), so that the
    // variants differ only in the bodies and the Accept header.
    http::Transport transport(cp->server(), tls, std::chrono::seconds(30), "lockstep-bench-pod-proto");
    const Api api{transport, "Bearer " + cp->token(), *schema};
    const auto view = bench_job();
    std::cout << "kube-apiserver at " << cp->server() << "; " << pods << " pods a round by " << clients
              << " clients, each variant in a namespace of its own\n";
    if (!check(*cp, client, api, view)) return 1;

    const size_t nv = std::size(kVariants);
    std::vector<std::vector<double>> api_ms(nv), etcd_ms(nv), client_ms(nv), codec_ms(nv), rate(nv);
    for (int round = 1; round <= rounds && !bench::g_stop; ++round) {
      for (size_t j = 0; j < nv && !bench::g_stop; ++j) {
        const size_t k = (j + static_cast<size_t>(round - 1)) % nv;
        const Round r = measure(*cp, api, view, kVariants[k], "v" + std::to_string(k) + "-" + std::to_string(round),
                                pods, clients);
        if (bench::g_stop) break;  // a round cut short is not one
        api_ms[k].push_back(r.api_ms);
        etcd_ms[k].push_back(r.etcd_ms);
        client_ms[k].push_back(r.client_ms);
        codec_ms[k].push_back(r.codec_ms);
        rate[k].push_back(r.pods_per_s);
        std::cout << "   round " << round << " " << std::left << std::setw(36) << kVariants[k].name << std::right
                  << std::fixed << std::setprecision(3) << r.api_ms << " ms API server CPU per pod, " << r.etcd_ms
                  << " ms etcd, " << std::setprecision(1) << r.pods_per_s << " pods/s, " << r.errors
                  << " errors; the bench " << std::setprecision(3) << r.client_ms << " ms CPU per pod (" << r.codec_ms
                  << " ms of it encoding and decoding)" << (r.first_error.empty() ? "" : "; first error: ")
                  << r.first_error << std::endl;
      }
    }
    for (const auto& v : api_ms)
      if (v.empty()) return bench::g_stop ? 130 : 1;
    auto med = [](const std::vector<double>& v) { return bench::percentile(v, 0.5); };
    for (size_t k = 0; k < nv; ++k)
      std::cout << "   median " << std::left << std::setw(36) << kVariants[k].name << std::right << std::setprecision(3)
                << med(api_ms[k]) << " ms API server CPU per pod, " << med(etcd_ms[k]) << " ms etcd, "
                << std::setprecision(1) << med(rate[k]) << " pods/s; the bench " << std::setprecision(3)
                << med(client_ms[k]) << " ms CPU per pod (" << med(codec_ms[k]) << " ms encoding and decoding)\n";
    for (size_t k = 1; k < nv; ++k)
      std::cout << "   " << static_cast<char>('a' + k) << "/a: x" << std::setprecision(2) << med(api_ms[k]) / med(api_ms[0])
                << " API server CPU, x" << med(etcd_ms[k]) / med(etcd_ms[0]) << " etcd CPU, x"
                << med(client_ms[k]) / med(client_ms[0]) << " the bench's CPU, x" << med(rate[k]) / med(rate[0])
                << " pods/s\n";
  } catch (const std::exception& e) {
    std::cout << "FAILED: " << e.what() << std::endl;
    return 1;
  }
  return bench::g_stop ? 130 : 0;
}
