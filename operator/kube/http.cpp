#include "kube/http.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "lockstep/text.hpp"

namespace lockstep::kube::http {
namespace {

constexpr size_t kMaxIdle = 64;                         // idle connections kept for reuse
constexpr auto kIdleLimit = std::chrono::seconds(90);   // client-go's IdleConnTimeout
constexpr size_t kMaxHead = 1 << 20;                    // a bigger response head is refused
constexpr size_t kBufferSize = 16 * 1024;               // one TLS record

std::string openssl_errors() {
  std::string out;
  for (unsigned long e; (e = ERR_get_error()) != 0;) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c | 0x20) : c; }

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return lower(x) == lower(y); });
}

bool icontains(std::string_view hay, std::string_view needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end(), [](char x, char y) { return lower(x) == lower(y); }) != hay.end();
}

bool digit(char c) { return c >= '0' && c <= '9'; }
bool xdigit(char c) { return digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// A printable excerpt of bytes that were not what was expected, for an error message.
std::string excerpt(std::string_view s) {
  std::string out;
  for (char ch : s.substr(0, 60)) out += (ch >= 0x20 && ch < 0x7f) ? ch : '.';
  return out;
}

// The socket under a TLS session, read and written through a BIO of our own so that a write
// to a closed connection is an error (MSG_NOSIGNAL), never a SIGPIPE that ends the process.
struct Socket {
  int fd = -1;
  bool eof = false;       // the peer closed its side
  bool dontwait = false;  // one non-blocking look (Connection::closed_while_idle)
  int error = 0;          // errno of the last failed call
};

// One send(): the bytes written, or -1 with s.error set; never SIGPIPE, EINTR retried.
ssize_t socket_send(Socket& s, const char* data, size_t len) {
  for (;;) {
    ssize_t n = ::send(s.fd, data, len, MSG_NOSIGNAL);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    s.error = errno;
    return -1;
  }
}

// One recv(): the bytes read, 0 at the end (s.eof set), or -1 with s.error set.
ssize_t socket_recv(Socket& s, char* data, size_t len) {
  for (;;) {
    ssize_t n = ::recv(s.fd, data, len, s.dontwait ? MSG_DONTWAIT : 0);
    if (n > 0) return n;
    if (n == 0) {
      s.eof = true;
      return 0;
    }
    if (errno == EINTR) continue;
    s.error = errno;
    return -1;
  }
}

int bio_write(BIO* b, const char* data, int len) {
  BIO_clear_retry_flags(b);
  return static_cast<int>(socket_send(*static_cast<Socket*>(BIO_get_data(b)), data, static_cast<size_t>(len)));
}

int bio_read(BIO* b, char* data, int len) {
  auto* s = static_cast<Socket*>(BIO_get_data(b));
  BIO_clear_retry_flags(b);
  ssize_t n = socket_recv(*s, data, static_cast<size_t>(len));
  if (n < 0 && s->dontwait && (s->error == EAGAIN || s->error == EWOULDBLOCK)) BIO_set_retry_read(b);
  return static_cast<int>(n);
}

long bio_ctrl(BIO* b, int cmd, long, void*) {
  if (cmd == BIO_CTRL_FLUSH) return 1;
  if (cmd == BIO_CTRL_EOF) return static_cast<Socket*>(BIO_get_data(b))->eof ? 1 : 0;
  return 0;
}

int bio_create(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

int bio_destroy(BIO*) { return 1; }  // the socket belongs to the Connection

const BIO_METHOD* socket_bio() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "lockstep socket");
    if (!m) throw std::runtime_error("cannot create an OpenSSL BIO method: " + openssl_errors());
    BIO_meth_set_write(m, bio_write);
    BIO_meth_set_read(m, bio_read);
    BIO_meth_set_ctrl(m, bio_ctrl);
    BIO_meth_set_create(m, bio_create);
    BIO_meth_set_destroy(m, bio_destroy);
    return m;
  }();
  return method;
}

std::string describe(int err) {
  if (err == EAGAIN || err == EWOULDBLOCK) return "timed out";
  return std::strerror(err);
}

}  // namespace

class Connection {
 public:
  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() {
    if (ssl) SSL_free(ssl);  // and its BIO
    if (sock.fd >= 0) ::close(sock.fd);
  }

  Socket sock;
  SSL* ssl = nullptr;
  std::string out;  // the request being written
  std::vector<char> buf = std::vector<char>(kBufferSize);
  size_t rpos = 0, wpos = 0;  // unread bytes are buf[rpos, wpos)
  bool reusable = true;
  std::chrono::steady_clock::time_point idle_since;

  std::string_view pending() const { return {buf.data() + rpos, wpos - rpos}; }
  void consume(size_t n) {
    rpos += n;
    if (rpos == wpos) rpos = wpos = 0;
  }

  // Reads what has arrived (waiting for at least a byte): > 0 bytes added to pending(), 0 at
  // the end of the stream, -1 on an error (`error` says what).
  long fill(std::string& error) {
    if (buf.size() - wpos < 4096) {
      if (rpos > 0) {
        std::memmove(buf.data(), buf.data() + rpos, wpos - rpos);
        wpos -= rpos;
        rpos = 0;
      }
      if (buf.size() - wpos < 4096) buf.resize(buf.size() * 2);
    }
    int room = static_cast<int>(std::min<size_t>(buf.size() - wpos, INT_MAX));
    if (ssl) {
      ERR_clear_error();
      int n = SSL_read(ssl, buf.data() + wpos, room);
      if (n > 0) {
        wpos += static_cast<size_t>(n);
        return n;
      }
      int e = SSL_get_error(ssl, n);
      if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && sock.eof)) return 0;
      error = "read: " + (e == SSL_ERROR_SSL ? openssl_errors() : describe(sock.error));
      return -1;
    }
    ssize_t n = socket_recv(sock, buf.data() + wpos, static_cast<size_t>(room));
    if (n > 0) wpos += static_cast<size_t>(n);
    if (n < 0) error = "read: " + describe(sock.error);
    return static_cast<long>(n);
  }

  bool write_all(std::string_view data, std::string& error) {
    if (ssl) {
      ERR_clear_error();
      int n = SSL_write(ssl, data.data(), static_cast<int>(data.size()));  // all of it, or an error
      if (n > 0) return true;
      int e = SSL_get_error(ssl, n);
      error = "write: " + (e == SSL_ERROR_SSL ? openssl_errors() : describe(sock.error));
      return false;
    }
    while (!data.empty()) {
      ssize_t n = socket_send(sock, data.data(), data.size());
      if (n <= 0) {
        error = "write: " + (n < 0 ? describe(sock.error) : std::string("nothing written"));
        return false;
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Whether the server closed (or broke) this connection while it sat in the pool. Readable
  // while idle means the end, a reset, or bytes nobody asked for; under TLS 1.3 it can also be
  // a session ticket, which one non-blocking peek consumes, leaving nothing to read.
  bool closed_while_idle() {
    pollfd p{sock.fd, POLLIN, 0};
    bool buffered = ssl && SSL_has_pending(ssl);  // read ahead of the last answer
    if (::poll(&p, 1, 0) == 0 && !buffered) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
    if (!ssl) return true;
    sock.dontwait = true;
    ERR_clear_error();
    char c;
    int n = SSL_peek(ssl, &c, 1);
    int e = SSL_get_error(ssl, n);
    sock.dontwait = false;
    ERR_clear_error();
    return !(n <= 0 && e == SSL_ERROR_WANT_READ);
  }
};

namespace {

struct Head {
  int status = 0;
  long long length = -1;  // Content-Length; -1 when absent
  bool chunked = false;
  bool close = false;     // the server closes the connection after this answer
};

// Reads a response's status line and headers. `got_bytes`: whether any byte of an answer
// arrived (a request that got none on a reused connection may be sent again).
bool read_head(Connection& c, Head& h, std::string& error, bool& got_bytes) {
  for (;;) {
    size_t end, scanned = 0;
    for (;;) {
      auto p = c.pending();
      if (!p.empty()) got_bytes = true;
      end = p.find("\r\n\r\n", scanned > 3 ? scanned - 3 : 0);
      if (end != std::string_view::npos) break;
      scanned = p.size();
      if (p.size() > kMaxHead) {
        error = "response headers longer than 1 MiB";
        return false;
      }
      long n = c.fill(error);
      if (n == 0) error = got_bytes ? "connection closed in the middle of a response" : "connection closed before any response";
      if (n <= 0) return false;
    }
    std::string_view head = c.pending().substr(0, end);
    size_t eol = head.find("\r\n");
    std::string_view line = head.substr(0, eol);
    if (line.size() < 12 || line.substr(0, 7) != "HTTP/1." || line[8] != ' ' || !digit(line[9]) ||
        !digit(line[10]) || !digit(line[11])) {
      error = "not an HTTP/1.x response: '" + excerpt(line) + "'";
      return false;
    }
    h = Head{};
    h.status = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
    bool http10 = line[7] == '0';
    h.close = http10;
    std::string_view rest = eol == std::string_view::npos ? std::string_view{} : head.substr(eol + 2);
    while (!rest.empty()) {
      size_t next = rest.find("\r\n");
      std::string_view field = rest.substr(0, next);
      rest = next == std::string_view::npos ? std::string_view{} : rest.substr(next + 2);
      size_t colon = field.find(':');
      if (colon == std::string_view::npos) continue;
      std::string_view name = field.substr(0, colon), value = text::trim(field.substr(colon + 1));
      if (iequals(name, "content-length")) {
        long long v = 0;
        if (value.empty() || value.size() > 18 || !std::all_of(value.begin(), value.end(), digit)) {
          error = "bad Content-Length '" + excerpt(value) + "'";
          return false;
        }
        for (char d : value) v = v * 10 + (d - '0');
        h.length = v;
      } else if (iequals(name, "transfer-encoding")) {
        if (icontains(value, "chunked")) h.chunked = true;
      } else if (iequals(name, "connection")) {
        if (icontains(value, "close")) h.close = true;
        else if (http10 && icontains(value, "keep-alive")) h.close = false;
      }
    }
    c.consume(end + 4);
    if (h.status >= 100 && h.status < 200) continue;  // 100 Continue and the like: the answer follows
    return true;
  }
}

bool read_line(Connection& c, std::string& line, std::string& error) {
  for (;;) {
    auto p = c.pending();
    size_t eol = p.find("\r\n");
    if (eol != std::string_view::npos) {
      line.assign(p.substr(0, eol));
      c.consume(eol + 2);
      return true;
    }
    if (p.size() > 4096) {
      error = "a chunk header longer than 4 KiB";
      return false;
    }
    long n = c.fill(error);
    if (n == 0) error = "connection closed in the middle of a response body";
    if (n <= 0) return false;
  }
}

// Hands the next `n` body bytes to the sink as they arrive; `stopped` when the sink said so.
bool pass(Connection& c, unsigned long long n, const Sink& sink, bool& stopped, std::string& error) {
  while (n > 0) {
    if (c.pending().empty()) {
      long got = c.fill(error);
      if (got == 0) error = "connection closed in the middle of a response body";
      if (got <= 0) return false;
    }
    auto p = c.pending();
    size_t take = static_cast<size_t>(std::min<unsigned long long>(p.size(), n));
    bool more = sink(p.substr(0, take));
    c.consume(take);
    n -= take;
    if (!more) {
      stopped = true;
      return true;
    }
  }
  return true;
}

bool read_body(Connection& c, Head& h, const Sink& sink, bool& stopped, std::string& error) {
  if (h.status == 204 || h.status == 304) return true;
  if (h.chunked) {
    std::string line;
    for (;;) {
      if (!read_line(c, line, error)) return false;
      std::string_view size_text = text::trim(std::string_view(line).substr(0, line.find(';')));
      unsigned long long size = 0;
      if (size_text.empty() || size_text.size() > 15 || !std::all_of(size_text.begin(), size_text.end(), xdigit)) {
        error = "bad chunk size '" + excerpt(line) + "'";
        return false;
      }
      for (char d : size_text) size = size * 16 + static_cast<unsigned>(digit(d) ? d - '0' : (d | 0x20) - 'a' + 10);
      if (size == 0) {  // the last chunk, then trailers up to an empty line
        do {
          if (!read_line(c, line, error)) return false;
        } while (!line.empty());
        return true;
      }
      if (!pass(c, size, sink, stopped, error)) return false;
      if (stopped) return true;
      if (!read_line(c, line, error)) return false;
      if (!line.empty()) {
        error = "chunk longer than its size";
        return false;
      }
    }
  }
  if (h.length >= 0) return pass(c, static_cast<unsigned long long>(h.length), sink, stopped, error);
  h.close = true;  // neither a length nor chunks: the body runs to the end of the connection
  for (;;) {
    if (!c.pending().empty()) {
      bool more = sink(c.pending());
      c.consume(c.pending().size());
      if (!more) {
        stopped = true;
        return true;
      }
    }
    long n = c.fill(error);
    if (n == 0) return true;
    if (n < 0) return false;
  }
}

// Reads one whole answer on `c`: a 200's body into `sink` when one is given, a success's body
// nowhere when `discard_ok`, any other body into reply.body (at most `max_body` bytes of it when
// that is not 0). False on a transport error (reply.status is then 0).
bool receive(Connection& c, Reply& reply, const Sink* sink, bool& got_bytes, bool discard_ok = false,
             size_t max_body = 0) {
  Head h;
  got_bytes = false;
  if (!read_head(c, h, reply.error, got_bytes)) {
    c.reusable = false;
    return false;
  }
  reply.status = h.status;
  bool stopped = false, ok;
  if (sink && h.status == 200) {
    ok = read_body(c, h, *sink, stopped, reply.error);
  } else if (discard_ok && h.status >= 200 && h.status < 300) {
    static const Sink drop = [](std::string_view) { return true; };
    ok = read_body(c, h, drop, stopped, reply.error);
  } else {
    const size_t cap = max_body ? max_body : SIZE_MAX;
    const size_t most_reserved = std::min<size_t>(cap, 64 << 20);
    if (h.length > 0) reply.body.reserve(static_cast<size_t>(std::min<long long>(h.length, most_reserved)));
    Sink collect = [&reply, cap](std::string_view piece) {
      if (piece.size() > cap - reply.body.size()) return false;
      reply.body.append(piece);
      return true;
    };
    ok = read_body(c, h, collect, stopped, reply.error);
    if (ok && stopped) {
      ok = false;
      reply.error = "an HTTP " + std::to_string(h.status) + " answer's body is longer than " + std::to_string(cap) +
                    " bytes, the most that is read of it";
    }
  }
  if (!ok) {
    reply.status = 0;
    c.reusable = false;
    return false;
  }
  if (h.close || stopped) c.reusable = false;
  return true;
}

// Every PEM certificate in `pem` into `store`; how many.
int add_certificates(X509_STORE* store, const std::string& pem) {
  BIO* mem = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  int n = 0;
  while (X509* cert = PEM_read_bio_X509(mem, nullptr, nullptr, nullptr)) {
    if (X509_STORE_add_cert(store, cert) == 1) ++n;
    X509_free(cert);
  }
  BIO_free(mem);
  ERR_clear_error();  // the end of the data reads as "no start line"
  return n;
}

}  // namespace

void Interrupt::interrupt() {
  std::lock_guard<std::mutex> lock(mu_);
  interrupted_ = true;
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);  // a blocked read returns at once
}

bool Interrupt::interrupted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return interrupted_;
}

bool Interrupt::attach(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  if (interrupted_) return false;
  fd_ = fd;
  return true;
}

void Interrupt::detach() {
  std::lock_guard<std::mutex> lock(mu_);
  fd_ = -1;
}

Transport::Transport(const std::string& server, const TlsConfig& tls, std::chrono::milliseconds timeout,
                     std::string user_agent)
    : timeout_(timeout), user_agent_(std::move(user_agent)) {
  parse_server(server);
  if (tls_) make_tls_context(tls);
}

// scheme://host[:port][/prefix] into tls_, host_, port_, host_header_ and prefix_.
void Transport::parse_server(const std::string& server) {
  auto bad = [&server](const std::string& why) {
    return std::invalid_argument("server '" + server + "': " + why + "; expected https://HOST[:PORT][/PATH]");
  };
  size_t sep = server.find("://");
  if (sep == std::string::npos) throw bad("no scheme");
  std::string scheme = server.substr(0, sep);
  std::transform(scheme.begin(), scheme.end(), scheme.begin(), lower);
  if (scheme == "https") {
    tls_ = true;
    port_ = "443";
  } else if (scheme == "http") {
    tls_ = false;
    port_ = "80";
  } else {
    throw bad("scheme '" + scheme + "' is neither https nor http");
  }
  std::string rest = server.substr(sep + 3);
  size_t slash = rest.find('/');
  host_header_ = rest.substr(0, slash);
  if (slash != std::string::npos) prefix_ = rest.substr(slash);
  while (!prefix_.empty() && prefix_.back() == '/') prefix_.pop_back();
  if (host_header_.empty()) throw bad("no host");
  if (host_header_.find('@') != std::string::npos) throw bad("user information in the URL is not supported");
  std::string port;
  if (host_header_[0] == '[') {
    size_t close = host_header_.find(']');
    if (close == std::string::npos) throw bad("unclosed '['");
    host_ = host_header_.substr(1, close - 1);
    std::string after = host_header_.substr(close + 1);
    if (!after.empty() && after[0] != ':') throw bad("text after ']'");
    if (!after.empty()) port = after.substr(1);
  } else {
    size_t colon = host_header_.rfind(':');
    host_ = host_header_.substr(0, colon);
    if (colon != std::string::npos) port = host_header_.substr(colon + 1);
  }
  if (!port.empty()) {
    if (!std::all_of(port.begin(), port.end(), digit) || port.size() > 5 || std::stoi(port) == 0 || std::stoi(port) > 65535)
      throw bad("port '" + port + "' is not 1 to 65535");
    port_ = port;
  }
  if (host_.empty()) throw bad("no host");
  unsigned char addr[sizeof(in6_addr)];
  host_is_ip_ = inet_pton(AF_INET, host_.c_str(), addr) == 1 || inet_pton(AF_INET6, host_.c_str(), addr) == 1;
}

namespace {

// The client certificate (with any chain after it) and key of `tls` into ctx; "" or what is wrong.
std::string use_client_certificate(SSL_CTX* ctx, const TlsConfig& tls) {
  BIO* mem = BIO_new_mem_buf(tls.cert_pem.data(), static_cast<int>(tls.cert_pem.size()));
  X509* leaf = PEM_read_bio_X509(mem, nullptr, nullptr, nullptr);
  if (!leaf) {
    BIO_free(mem);
    return "client-certificate is not a PEM certificate";
  }
  int used = SSL_CTX_use_certificate(ctx, leaf);
  X509_free(leaf);
  while (X509* extra = PEM_read_bio_X509(mem, nullptr, nullptr, nullptr)) SSL_CTX_add0_chain_cert(ctx, extra);
  BIO_free(mem);
  ERR_clear_error();
  if (used != 1) return "client-certificate cannot be used";
  mem = BIO_new_mem_buf(tls.key_pem.data(), static_cast<int>(tls.key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(mem, nullptr, nullptr, nullptr);
  BIO_free(mem);
  if (!key) return "client-key is not a PEM private key";
  used = SSL_CTX_use_PrivateKey(ctx, key);
  EVP_PKEY_free(key);
  if (used != 1 || SSL_CTX_check_private_key(ctx) != 1) return "client-key does not match client-certificate";
  return "";
}

}  // namespace

void Transport::make_tls_context(const TlsConfig& tls) {
  ctx_ = SSL_CTX_new(TLS_client_method());
  if (!ctx_) throw std::runtime_error("cannot create a TLS context: " + openssl_errors());
  auto fail = [this](const std::string& what) {
    std::string detail = openssl_errors();
    SSL_CTX_free(ctx_);
    ctx_ = nullptr;
    return std::runtime_error(what + (detail.empty() ? "" : " (" + detail + ")"));
  };
  SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx_, SSL_OP_IGNORE_UNEXPECTED_EOF);  // a close without close_notify is an end
  // Records are read with whatever follows them in one recv(), not a header and then a body,
  // and each connection keeps its record buffers (SSL_MODE_RELEASE_BUFFERS would free and
  // allocate them per record); at most kMaxIdle idle connections hold them.
  SSL_CTX_set_read_ahead(ctx_, 1);
  static const unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx_, kAlpn, sizeof kAlpn);
  verify_ = !tls.insecure_skip_verify;
  SSL_CTX_set_verify(ctx_, verify_ ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nullptr);
  if (verify_) {
    // With the cluster's CA given, it alone is trusted, as client-go does; the system's
    // roots are never loaded (about 20 ms of CPU for 140 certificates, bench/operator).
    if (!tls.ca_pem.empty()) {
      if (add_certificates(SSL_CTX_get_cert_store(ctx_), tls.ca_pem) == 0)
        throw fail("certificate-authority holds no PEM certificate");
    } else if (SSL_CTX_set_default_verify_paths(ctx_) != 1) {
      throw fail("cannot load the system's CA certificates");
    }
  }
  if (!tls.cert_pem.empty())
    if (std::string problem = use_client_certificate(ctx_, tls); !problem.empty()) throw fail(problem);
}

Transport::~Transport() {
  idle_.clear();
  if (ctx_) SSL_CTX_free(ctx_);
}

size_t Transport::idle_connections() const {
  std::lock_guard<std::mutex> lock(pool_mu_);
  return idle_.size();
}

std::unique_ptr<Connection> Transport::dial(std::chrono::milliseconds timeout, std::string& error, Interrupt* interrupt) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = host_is_ip_ ? AI_NUMERICHOST : 0;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host_.c_str(), port_.c_str(), &hints, &found); rc != 0) {
    error = "cannot resolve " + host_ + ": " + gai_strerror(rc);
    return nullptr;
  }
  auto c = std::make_unique<Connection>();
  std::string why = "no address";
  timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  for (addrinfo* ai = found; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);  // connect() honours it too
    // An interrupt reaches the connect and the handshake too (shutdown makes them fail).
    if (interrupt && !interrupt->attach(fd)) {
      ::close(fd);
      freeaddrinfo(found);
      error = "interrupted";
      return nullptr;
    }
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      c->sock.fd = fd;
      break;
    }
    why = describe(errno);
    if (interrupt) interrupt->detach();
    ::close(fd);
  }
  freeaddrinfo(found);
  if (c->sock.fd < 0) {
    error = "cannot connect to " + host_header_ + ": " + why;
    return nullptr;
  }
  if (tls_) {
    c->ssl = SSL_new(ctx_);
    BIO* bio = c->ssl ? BIO_new(socket_bio()) : nullptr;
    if (!bio) {
      error = "cannot start TLS: " + openssl_errors();
      if (interrupt) interrupt->detach();
      return nullptr;
    }
    BIO_set_data(bio, &c->sock);
    SSL_set_bio(c->ssl, bio, bio);
    if (!host_is_ip_) SSL_set_tlsext_host_name(c->ssl, host_.c_str());
    if (verify_) {  // the certificate must name the host (or IP) we dialled
      if (host_is_ip_) X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), host_.c_str());
      else SSL_set1_host(c->ssl, host_.c_str());
    }
    ERR_clear_error();
    if (SSL_connect(c->ssl) != 1) {
      long verified = SSL_get_verify_result(c->ssl);
      std::string detail = verified != X509_V_OK ? X509_verify_cert_error_string(verified) : openssl_errors();
      if (detail.empty()) detail = c->sock.eof ? "connection closed" : describe(c->sock.error);
      error = "TLS handshake with " + host_header_ + " failed: " + detail;
      if (interrupt) interrupt->detach();  // before the descriptor closes: its number may be reused
      return nullptr;
    }
  }
  ++opened_;
  return c;
}

std::unique_ptr<Connection> Transport::acquire(bool& reused, std::string& error) {
  auto now = std::chrono::steady_clock::now();
  for (;;) {
    std::unique_ptr<Connection> c;
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      if (idle_.empty()) break;
      c = std::move(idle_.back());  // the newest: the least likely to have been closed
      idle_.pop_back();
    }
    if (now - c->idle_since > kIdleLimit || c->closed_while_idle()) continue;  // dropped
    reused = true;
    return c;
  }
  reused = false;
  return dial(timeout_, error);
}

void Transport::release(std::unique_ptr<Connection> c) {
  if (!c->reusable) return;
  c->idle_since = std::chrono::steady_clock::now();
  if (c->buf.size() > 4 * kBufferSize && c->pending().empty()) {
    c->buf.assign(kBufferSize, 0);
    c->rpos = c->wpos = 0;
  }
  std::lock_guard<std::mutex> lock(pool_mu_);
  if (idle_.size() < kMaxIdle) idle_.push_back(std::move(c));
}

void Transport::encode(const Request& r, std::string& s) const {
  s.clear();  // the connection's buffer: its capacity stays, so a request allocates nothing
  s.reserve(160 + prefix_.size() + r.target.size() + host_header_.size() + user_agent_.size() +
            r.authorization.size() + r.content_type.size() + r.accept.size() + r.body.size());
  s.append(r.method).append(" ").append(prefix_).append(r.target).append(" HTTP/1.1\r\nHost: ").append(host_header_);
  s.append("\r\nUser-Agent: ").append(user_agent_).append("\r\nAccept: ");
  s.append(r.accept.empty() ? std::string_view("application/json") : r.accept).append("\r\n");
  if (!r.authorization.empty()) s.append("Authorization: ").append(r.authorization).append("\r\n");
  if (!r.body.empty() || r.method == "POST" || r.method == "PUT" || r.method == "PATCH") {
    if (!r.content_type.empty()) s.append("Content-Type: ").append(r.content_type).append("\r\n");
    s.append("Content-Length: ").append(std::to_string(r.body.size())).append("\r\n");
  }
  s.append("\r\n").append(r.body);
}

bool Transport::send(Connection& c, const Request& r, std::string& error) {
  encode(r, c.out);
  if (!c.write_all(c.out, error)) {
    c.reusable = false;
    return false;
  }
  return true;
}

Reply Transport::round_trip(const Request& request) {
  Reply reply;
  for (int attempt = 0;; ++attempt) {
    reply = Reply{};
    bool reused = false, got_bytes = false;
    auto c = acquire(reused, reply.error);
    if (!c) return reply;
    if (send(*c, request, reply.error) && receive(*c, reply, nullptr, got_bytes, request.discard_ok_body, request.max_body)) {
      release(std::move(c));
      return reply;
    }
    // Nothing came back on a connection the server may have closed under us: once more.
    if (!(reused && !got_bytes && attempt == 0)) return reply;
  }
}

std::vector<Reply> Transport::round_trip_all(const std::vector<Request>& requests,
                                             const std::function<void(size_t)>& before_send) {
  size_t n = requests.size();
  std::vector<Reply> replies(n);
  std::vector<std::unique_ptr<Connection>> conns(n);
  std::vector<char> reused(n, 0), again(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (before_send) before_send(i);
    bool r = false;
    conns[i] = acquire(r, replies[i].error);
    if (!conns[i]) continue;
    reused[i] = r;
    if (!send(*conns[i], requests[i], replies[i].error)) {
      conns[i].reset();
      again[i] = r;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (conns[i]) {
      bool got_bytes = false;
      if (receive(*conns[i], replies[i], nullptr, got_bytes, requests[i].discard_ok_body, requests[i].max_body)) {
        release(std::move(conns[i]));
        continue;
      }
      conns[i].reset();
      again[i] = reused[i] && !got_bytes;
    }
    if (again[i]) replies[i] = round_trip(requests[i]);
  }
  return replies;
}

Reply Transport::stream(const Request& request, std::chrono::milliseconds timeout, Interrupt& interrupt, const Sink& sink) {
  Reply reply;
  // Its own connection, held for as long as the stream lasts: dialled with the transport's
  // timeout, attached to the interrupt from its first moment, then read with `timeout`.
  auto c = dial(timeout_, reply.error, &interrupt);
  if (!c) {
    if (interrupt.interrupted()) reply.error = "interrupted";
    return reply;
  }
  timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  setsockopt(c->sock.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  struct Detach {
    Interrupt& i;
    ~Detach() { i.detach(); }  // before the connection closes: its descriptor may be reused
  } detach{interrupt};
  bool got_bytes = false;
  if (send(*c, request, reply.error)) receive(*c, reply, &sink, got_bytes, false, request.max_body);
  if (interrupt.interrupted()) {
    reply.status = 0;
    reply.error = "interrupted";
  }
  return reply;
}

}  // namespace lockstep::kube::http
