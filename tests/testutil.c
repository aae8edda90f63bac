/* testutil.c: see testutil.h. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

const char *tu_shared_path(const char *rel) {
    static char buf[4096];
    const char *env = getenv("SEER_SHARED_DIR");
    snprintf(buf, sizeof buf, "%s/%s", env ? env : SEER_SHARED_DIR, rel);
    return buf;
}

const char *tu_tmp_path(const char *name) {
    static char dir[256];
    static char buf[4][512];
    static int k;
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/seer-test-%d", (int)getpid());
        mkdir(dir, 0700);
    }
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

uint64_t tu_rand_u64(uint64_t *s) {
    uint64_t x = *s ? *s : 0x9E3779B97F4A7C15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

float tu_rand_uniform(uint64_t *s) { return (float)((tu_rand_u64(s) >> 40) / (double)(1 << 24)) * 2.f - 1.f; }

void tu_fill_random(float *x, size_t n, uint64_t *s) {
    for (size_t i = 0; i < n; i++)
        x[i] = tu_rand_uniform(s);
}

double tu_rel_err(const float *a, const float *b, size_t n) {
    double m = 1, e = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs(b[i]) > m)
            m = fabs(b[i]);
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) /* NaN counts as infinite error */
            e = isnan(d) ? INFINITY : d;
    }
    return e / m;
}

uint8_t *tu_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b)
        *size = (size_t)n;
    return b;
}

int tu_write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, size, f);
    fclose(f);
    return w == size ? 0 : -1;
}
