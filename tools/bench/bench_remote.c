/* Miss latency of a cache lookup (the operator API's nj_ops_cachedir_lookup) with the Redis tier (README "Fleet cache (Redis)"): no tier, Redis up
 * (value absent), Redis down (a port nothing listens on), a silent server (a socket of ours that never
 * answers). Prints; asserts nothing.
 *   bench_remote REDIS_PORT DOWN_PORT [DIR]   e.g. after `redis-server --port 6399 --save ''` */
#define NJ_OPERATOR_API
#include "normjit_ops.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static void run(const char *label, const char *root, const char *url, int n)
{
    nj_cachedir *c;
    if (nj_cachedir_open(root, 0, &c) != NJ_OK) { printf("cannot open %s\n", root); exit(1); }
    if (url && nj_ops_cachedir_attach_remote(c, url) != NJ_OK) { puts("open failed"); exit(1); }
    double first = 0, total = 0, mx = 0;
    for (int i = 0; i < n; i++) {
        char sig[64]; snprintf(sig, sizeof sig, "bench signature %d %s", i, label);
        double t = now_us();
        nj_ops_cachedir_lookup(c, sig, "so");
        double d = now_us() - t;
        if (i == 0) first = d; else { total += d; if (d > mx) mx = d; }
    }
    nj_ops_remote_info ri;
    memset(&ri, 0, sizeof ri);
    if (url) nj_ops_cachedir_remote_info(c, &ri);
    printf("%-28s first %8.1f us, then mean %7.1f us max %8.1f us over %d misses (errors %llu, skipped %llu)\n", label, first, total / (n - 1), mx, n - 1,
           (unsigned long long)ri.counters.errors, (unsigned long long)ri.counters.skipped);
    nj_cachedir_close(c);
}
int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_remote REDIS_PORT DOWN_PORT [DIR]\n");
        return 2;
    }
    const char *dir = argc > 3 ? argv[3] : "/tmp";
    char roots[4][512];
    for (int i = 0; i < 4; i++) snprintf(roots[i], sizeof roots[i], "%s/nj-bench-remote-%d-%d", dir, (int)getpid(), i);
    int port = atoi(argv[1]);
    char up[128], down[128], silent[128];
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(s, (void *)&a, sizeof a); listen(s, 1024); socklen_t l = sizeof a; getsockname(s, (void *)&a, &l);
    snprintf(up, sizeof up, "redis://127.0.0.1:%d/0", port);
    snprintf(down, sizeof down, "redis://127.0.0.1:%d/0", atoi(argv[2]));
    snprintf(silent, sizeof silent, "redis://127.0.0.1:%d/0", ntohs(a.sin_port));
    run("no remote tier", roots[0], NULL, 2000);
    run("redis up, value absent", roots[1], up, 2000);
    run("redis down (refused)", roots[2], down, 2000);
    run("silent server (50 ms)", roots[3], silent, 2000);
    return 0;
}
