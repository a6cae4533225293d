// nettest: the cluster tier's test image, one static binary (no libc in the image).
//
//   nettest serve PORT        answer every TCP connection with "hello from HOSTNAME\n"
//   nettest resolve NAME      print NAME's IPv4 addresses, one a line (the pod's resolv.conf)
//   nettest get HOST PORT     connect, print what the server sends; exit 1 on failure
//   nettest connect HOST PORT connect and print "connected to IP:PORT" (for servers that wait)
//   nettest cat FILE          print FILE (a mounted secret, /etc/resolv.conf)
//
// As a container's PID 1 it exits on SIGTERM at once (the kernel ignores signals PID 1 has
// no handler for, which would make every pod deletion wait for its grace period).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static void on_stop(int sig) { (void)sig; _exit(0); }

static int serve(int port) {
  int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_ANY)};
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(s, (struct sockaddr*)&a, sizeof a) != 0 || listen(s, 16) != 0) { perror("nettest: bind/listen"); return 1; }
  char host[256] = "?", reply[300];
  gethostname(host, sizeof host - 1);
  int n = snprintf(reply, sizeof reply, "hello from %s\n", host);
  printf("nettest: serving on port %d as %s\n", port, host);
  fflush(stdout);
  for (;;) {
    int c = accept(s, NULL, NULL);
    if (c < 0) continue;
    if (write(c, reply, n) != n) perror("nettest: write");
    close(c);
  }
}

static struct addrinfo* lookup(const char* name) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int rc = getaddrinfo(name, NULL, &hints, &res);
  if (rc != 0) { fprintf(stderr, "nettest: cannot resolve %s: %s\n", name, gai_strerror(rc)); return NULL; }
  return res;
}

static int resolve(const char* name) {
  struct addrinfo* res = lookup(name);
  if (!res) return 1;
  for (struct addrinfo* r = res; r; r = r->ai_next) {
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &((struct sockaddr_in*)r->ai_addr)->sin_addr, ip, sizeof ip);
    printf("%s\n", ip);
  }
  freeaddrinfo(res);
  return 0;
}

// dial: a connected socket to HOST:PORT (5 s timeouts), or -1 with the reason on stderr.
static int dial(const char* host, int port, struct sockaddr_in* a) {
  struct addrinfo* res = lookup(host);
  if (!res) return -1;
  *a = *(struct sockaddr_in*)res->ai_addr;
  freeaddrinfo(res);
  a->sin_port = htons(port);
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct timeval tv = {.tv_sec = 5};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(s, (struct sockaddr*)a, sizeof *a) != 0) { perror("nettest: connect"); close(s); return -1; }
  return s;
}

static int connect_only(const char* host, int port) {
  struct sockaddr_in a;
  int s = dial(host, port, &a);
  if (s < 0) return 1;
  char ip[INET_ADDRSTRLEN];
  printf("connected to %s:%d\n", inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip), port);
  close(s);
  return 0;
}

static int cat(const char* path) {
  FILE* f = fopen(path, "r");
  if (!f) { perror(path); return 1; }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stdout);
  fclose(f);
  return 0;
}

static int get(const char* host, int port) {
  struct sockaddr_in a;
  int s = dial(host, port, &a);
  if (s < 0) return 1;
  char buf[512];
  ssize_t n;
  while ((n = read(s, buf, sizeof buf)) > 0) fwrite(buf, 1, (size_t)n, stdout);
  return n < 0 ? 1 : 0;
}

int main(int argc, char** argv) {
  signal(SIGTERM, on_stop);
  signal(SIGINT, on_stop);
  if (argc == 3 && strcmp(argv[1], "serve") == 0) return serve(atoi(argv[2]));
  if (argc == 3 && strcmp(argv[1], "resolve") == 0) return resolve(argv[2]);
  if (argc == 4 && strcmp(argv[1], "get") == 0) return get(argv[2], atoi(argv[3]));
  if (argc == 4 && strcmp(argv[1], "connect") == 0) return connect_only(argv[2], atoi(argv[3]));
  if (argc == 3 && strcmp(argv[1], "cat") == 0) return cat(argv[2]);
  fprintf(stderr, "usage: nettest serve PORT | resolve NAME | get HOST PORT | connect HOST PORT | cat FILE\n");
  return 2;
}
