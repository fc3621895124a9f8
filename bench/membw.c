/* membw: the machine's read bandwidth with T threads (sum of 64-bit loads over a buffer far
 * larger than the caches), best of 5 passes on 4 KiB pages and 5 on transparent huge pages
 * (radiance copies the weights into huge pages, so the bound must be the better of the two).
 * Prints GB/s; each page size's best goes to stderr. cc -O2 -pthread bench/membw.c */
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

static void *reader(void *arg) {
    size_t t = (size_t)(uintptr_t)arg, per = words / (size_t)nthreads;
    const uint64_t *p = buf + t * per;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= per; i += 4) s0 += p[i], s1 += p[i + 1], s2 += p[i + 2], s3 += p[i + 3];
    sink += s0 + s1 + s2 + s3;
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
    fprintf(stderr, "membw: %s pages %.2f GB/s\n", huge ? "huge" : "4 KiB", best_here);
    if (best_here > best) best = best_here;
    munmap(m, bytes);
    }
    printf("%.2f\n", best);
    return 0;
}
