/* membw: the machine's read bandwidth with T threads (a sum of vector loads over a buffer far
 * larger than the caches), best of 5 passes on 4 KiB pages and 5 on transparent huge pages
 * (radiance copies the weights into huge pages, so the bound must be the better of the two),
 * each once with the hardware prefetchers alone and once with a software prefetch a line at a
 * time 6 KiB ahead, as radiance's decode GEMMs read (the plain loop alone was a floor, not a
 * ceiling: radiance's BF16 decode read 60 GB/s in a minute it measured 48). Prints the best
 * GB/s; each (pages, prefetch) best goes to stderr. cc -O2 -march=native -pthread bench/membw.c */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { MB = 1 << 20 };
static uint64_t *buf;
static size_t words;
static int nthreads;
static volatile uint64_t sink;

/* 256 bytes an iteration into eight independent vector sums, so the loads, not the adds, are
 * the limit (a scalar or 16-byte loop measured 5-15% under what the weights stream at); built
 * with -march=native it uses the widest loads the CPU has. */
typedef uint64_t v4u64 __attribute__((vector_size(32)));
static int prefetch; /* the pass reads with a software prefetch PF_BYTES ahead */
enum { PF_BYTES = 6144 };
static void *reader(void *arg) {
    size_t t = (size_t)(uintptr_t)arg, per = words / (size_t)nthreads;
    const v4u64 *p = (const v4u64 *)(const void *)(buf + t * per);
    v4u64 s[8] = {{0}};
    for (size_t i = 0; i + 32 <= per; i += 32, p += 8) {
        if (prefetch && i * 8 + PF_BYTES < per * 8) /* the 256 bytes PF_BYTES ahead, a line at a time */
            for (int o = 0; o < 256; o += 64) __builtin_prefetch((const char *)p + PF_BYTES + o, 0, 3);
        for (int j = 0; j < 8; j++) s[j] += p[j];
    }
    uint64_t r = 0;
    for (int j = 0; j < 8; j++) r += s[j][0] + s[j][1] + s[j][2] + s[j][3];
    sink += r;
    return NULL;
}

int main(int argc, char **argv) {
    nthreads = argc > 1 ? atoi(argv[1]) : 2;
    size_t bytes = (size_t)(argc > 2 ? atoi(argv[2]) : 1024) * MB;
    words = bytes / 8;
    double best = 0;
    for (int huge = 0; huge < 2; huge++) {
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return perror("membw: mmap"), 1;
#ifdef MADV_HUGEPAGE
    if (huge && madvise(m, bytes, MADV_HUGEPAGE) != 0) fprintf(stderr, "membw: huge pages refused\n");
#endif
    buf = m;
    for (size_t i = 0; i < words; i++) buf[i] = i;
    for (prefetch = 0; prefetch < 2; prefetch++) {
    double best_here = 0;
    for (int r = 0; r < 5; r++) {
        struct timespec a, b;
        pthread_t th[64];
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (int t = 0; t < nthreads; t++) pthread_create(&th[t], NULL, reader, (void *)(uintptr_t)t);
        for (int t = 0; t < nthreads; t++) pthread_join(th[t], NULL);
        clock_gettime(CLOCK_MONOTONIC, &b);
        double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9, gbs = (double)bytes / s / 1e9;
        if (gbs > best_here) best_here = gbs;
    }
    fprintf(stderr, "membw: %s pages%s %.2f GB/s\n", huge ? "huge" : "4 KiB", prefetch ? ", software prefetch" : "", best_here);
    if (best_here > best) best = best_here;
    }
    munmap(m, bytes);
    }
    printf("%.2f\n", best);
    return 0;
}
